"""The OpenAPI document says what the server does (docs/api.md "OpenAPI", issue 37): event
streams are text, every body a route reads has a ``requestBody``, query and path
parameters are typed as the handlers parse them, the body rules the validators enforce
are in the schemas, security follows the deploy's auth mode, and ``Allow`` names the
matched route's methods. Each case checks the document and the server's answer."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.http.openapi.document import build
from runplane.settings import Settings
from tests.http.conftest import ADMIN


def _param(op: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in op["parameters"] if p["name"] == name)


def _component(document: dict[str, Any], name: str) -> Draft202012Validator:
    """A validator for one component schema, its $refs resolved within the document."""
    schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    return Draft202012Validator(schema)


async def test_event_streams_are_text_naming_their_events(app: QuartTrio) -> None:
    paths = build(app)["paths"]
    for path, names in (
        ("/v1/jobs/{job_id}/events", {"phase", "log", "metric"}),
        ("/v1/jobs/{job_id}/streams/{name}/data", {"stream", "lagged"}),
    ):
        ok = paths[path]["get"]["responses"]["200"]
        media = ok["content"]["text/event-stream"]
        assert media["schema"] == {"type": "string"}  # not a JSON object a client parses
        assert {e["event"] for e in media["x-events"]} == names
        assert all(e["data"] for e in media["x-events"])
        assert all(f"`{name}`" in ok["description"] for name in names)


async def test_every_body_a_route_reads_is_documented(app: QuartTrio) -> None:
    paths = build(app)["paths"]
    upload = paths["/v1/uploads"]["post"]["requestBody"]
    form = upload["content"]["multipart/form-data"]["schema"]
    assert upload["required"] and form["required"] == ["file"]
    assert form["properties"]["file"]["format"] == "binary"
    put = paths["/v1/artifacts/{key}"]["put"]["requestBody"]["content"]
    assert put["application/octet-stream"]["schema"]["format"] == "binary"
    for path in ("/mcp", "/v1/mcp"):
        rpc = paths[path]["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert rpc["oneOf"][0]["required"] == ["jsonrpc", "method"]
    teleop = paths["/v1/jobs/{job_id}/streams/{name}/teleop"]["post"]["requestBody"]
    assert "application/json" in teleop["content"]
    pack = paths["/v1/git/proxy/{connection_id}/git-upload-pack"]["post"]["requestBody"]
    assert "application/x-git-upload-pack-request" in pack["content"]


async def test_an_upload_without_its_file_field_is_refused(client: Any) -> None:
    empty = await client.post(
        "/v1/uploads",
        data=b"--b--\r\n",
        headers={"Content-Type": "multipart/form-data; boundary=b"},
    )
    assert empty.status_code == 400
    assert (await empty.get_json())["errors"][0]["key"] == "file"


async def test_query_parameters_are_typed_as_parsed(app: QuartTrio, client: Any) -> None:
    jobs = build(app)["paths"]["/v1/jobs"]["get"]
    assert _param(jobs, "limit")["schema"] == {"type": "integer", "minimum": 1, "maximum": 5000}
    assert _param(jobs, "offset")["schema"]["type"] == "integer"
    assert _param(jobs, "paginate")["schema"] == {"type": "boolean"}
    assert _param(jobs, "phase")["schema"]["enum"][0] == "queued"
    assert _param(jobs, "stack")["schema"]["pattern"].startswith("^[^")
    logs = build(app)["paths"]["/v1/jobs/{job_id}/logs"]["get"]
    assert _param(logs, "stream")["schema"]["enum"] == ["stdout", "stderr", "system"]
    # the server refuses what the document refuses...
    # (not of the type at all: bad_type, as a body's field; of the type but out of range:
    # invalid_query)
    for query, code in (
        ("limit=abc", "bad_type"),
        ("limit=%2B5", "bad_type"),
        ("limit=%205", "bad_type"),
        ("limit=0", "invalid_query"),
        ("paginate=maybe", "bad_type"),
    ):
        answer = await client.get(f"/v1/jobs?{query}")
        assert answer.status_code == 400, query
        assert (await answer.get_json())["code"] == code, query
    unknown = await (await client.get("/v1/jobs?phase=done")).get_json()
    assert unknown["errors"][0]["code"] == "not_allowed" and "queued" in unknown["detail"]
    # ...and takes what it allows; an empty value is the parameter left out
    assert _param(jobs, "limit")["allowEmptyValue"] is True
    assert isinstance(await (await client.get("/v1/jobs?limit=&phase=")).get_json(), list)
    page = await client.get("/v1/jobs?paginate=true&limit=5")
    assert page.status_code == 200 and "items" in await page.get_json()
    assert (await client.get("/v1/jobs?paginate=false")).status_code == 200
    assert isinstance(await (await client.get("/v1/jobs?paginate=0")).get_json(), list)


async def test_a_preflight_number_is_a_json_number(client: Any) -> None:
    assert (await client.get("/v1/policy/preflight?cpu_cores=1.5")).status_code == 200
    assert (await client.get("/v1/policy/preflight?cpu_cores=1e2")).status_code == 200
    for bad in ("1_0", "%201", "nan", "0x10"):
        answer = await client.get(f"/v1/policy/preflight?cpu_cores={bad}")
        assert answer.status_code == 400, bad


async def test_path_parameters_exclude_control_characters(app: QuartTrio, client: Any) -> None:
    paths = build(app)["paths"]
    job_id = _param(paths["/v1/jobs/{job_id}"]["get"], "job_id")["schema"]["pattern"]
    assert re.fullmatch(job_id, "job_x") and not re.fullmatch(job_id, "job\x01x")
    assert (await client.get("/v1/jobs/job%01x")).status_code == 400
    secret = _param(paths["/v1/secrets/{name}"]["put"], "name")["schema"]["pattern"]
    assert re.fullmatch(secret, "API_KEY") and not re.fullmatch(secret, "1key")
    key = _param(paths["/v1/artifacts/{key}"]["get"], "key")["schema"]["pattern"]
    assert re.fullmatch(key, "job_1/out/model.pt") and not re.fullmatch(key, "a/../b")


async def test_body_rules_are_in_the_schemas(app: QuartTrio, client: Any) -> None:
    document = build(app)
    batch = _component(document, "BatchBody")
    job = {"stack": "shell"}
    assert batch.is_valid({"jobs": [job]})
    assert batch.is_valid({"job": job, "sweep": {"x": [1, 2]}})
    for wrong in ({}, {"job": job}, {"jobs": [job], "job": job}, {"job": job, "sweep": {}}):
        assert not batch.is_valid(wrong), wrong
        answer = await client.post("/v1/jobs/batch", json=wrong)
        assert answer.status_code == 400, wrong
    schedule = _component(document, "ScheduleBody")
    base = {"name": "n", "job": {"stack": "shell"}}
    assert schedule.is_valid({**base, "every": "5m"})
    assert not schedule.is_valid({**base, "every": "5m", "cron": "* * * * *"})
    assert not schedule.is_valid(base)
    answer = await client.post("/v1/schedules", json={**base, "every": "5m", "cron": "* * * * *"})
    assert answer.status_code == 422  # the schedule service's refusal of its timing
    grant = _component(document, "GrantBody")
    assert not grant.is_valid({}) and grant.is_valid({"grantee_org": "org_x"})
    assert (await client.post("/v1/nodes/grants", json={})).status_code in (400, 401)
    stage = _component(document, "PipelineStageBody")
    assert not stage.is_valid({"stack": "shell"})
    assert stage.is_valid({"stack": "shell", "name": "a"})


async def test_priority_is_int32(app: QuartTrio, client: Any) -> None:
    schema = _component(build(app), "PriorityBody")
    assert schema.is_valid({"priority": 2**31 - 1}) and not schema.is_valid({"priority": 2**31})
    answer = await client.post("/v1/jobs/job_nope/priority", json={"priority": 2**31})
    assert answer.status_code == 400
    assert (await answer.get_json())["errors"][0]["key"] == "priority"


async def test_an_email_must_look_like_one(app: QuartTrio, client: Any) -> None:
    seat = _component(build(app), "SeatBody")
    assert seat.is_valid({"email": "a@b.example"})
    for wrong in ("not an email", "a\x1d@b.example", "a@b@c", " a@b.example"):
        assert not seat.is_valid({"email": wrong}), wrong
        answer = await client.post(
            "/v1/auth/seat", json={"email": wrong}, headers={"Authorization": f"Bearer {ADMIN}"}
        )
        assert answer.status_code == 400, wrong


async def test_a_token_has_a_known_role_or_known_scopes(app: QuartTrio, client: Any) -> None:
    mint = _component(build(app), "MintBody")
    assert mint.is_valid({"subject": "ci", "scopes": ["runs:submit"]})
    admin = {"Authorization": f"Bearer {ADMIN}"}
    for wrong in (
        {"subject": "ci", "scopes": [""]},
        {"subject": "ci", "role": "boss"},
        {"subject": "ci", "role": "member", "scopes": ["runs:submit"]},
    ):
        assert not mint.is_valid(wrong), wrong
        answer = await client.post("/v1/auth/tokens", json=wrong, headers=admin)
        assert answer.status_code == 400, wrong


@pytest.mark.parametrize("mode", ["off", "shadow", "required"])
async def test_security_follows_the_auth_mode(
    make_settings: Callable[..., Settings], mode: str
) -> None:
    application = create_app(make_settings(auth=mode))
    async with application.test_app():
        served = await (await application.test_client().get("/openapi.json")).get_json()
    validate(served)  # `{}` among the requirements is valid OpenAPI 3.1
    paths = served["paths"]
    anonymous = mode != "required"
    for path, method in (("/v1/jobs", "post"), ("/v1/jobs", "get"), ("/v1/stacks", "get")):
        assert ({} in paths[path][method]["security"]) is anonymous, (path, method)
    # routes the anonymous caller never passes keep their credential in every mode
    assert {} not in paths["/v1/policy"]["get"]["security"]  # manage
    assert {} not in paths["/v1/auth/tokens"]["get"]["security"]  # admin
    assert paths["/healthz"]["get"]["security"] == []


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/v1/nodes/join-tokens", {"GET", "POST"}),
        ("/v1/jobs/batch", {"POST"}),
        ("/v1/runs/validate", {"POST"}),
        ("/v1/jobs/job_x", {"GET"}),
    ],
)
async def test_allow_names_the_matched_routes_methods(
    app: QuartTrio, client: Any, path: str, allowed: set[str]
) -> None:
    documented = {m.upper() for m in build(app)["paths"][_template(app, path)]}
    assert documented == allowed
    options = await client.options(path)
    assert options.status_code == 200
    assert _methods(options.headers["Allow"]) - {"HEAD", "OPTIONS"} == allowed
    refused = await client.put(path)
    assert refused.status_code == 405
    assert _methods(refused.headers["Allow"]) - {"HEAD", "OPTIONS"} == allowed


def _methods(header: str) -> set[str]:
    return {m.strip() for m in header.split(",")}


def _template(app: QuartTrio, path: str) -> str:
    adapter = app.url_map.bind("localhost")
    rule, _ = adapter.match(path, method="OPTIONS", return_rule=True)
    return re.sub(r"<(?:[a-z_]+:)?(\w+)>", r"{\1}", rule.rule)
