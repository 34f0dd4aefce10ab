"""Errors that teach (#12): unknown body fields and query parameters name what is accepted
and the close name; an unknown stack suggests the close one and lists the catalog."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.http.openapi.route_doc import doc_of
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, ok_json
from tests.e2e.conftest import e2e_settings, start_server

SUBMIT_FIELDS = (
    "stack, image, command, env, config, workspace, inputs, outputs, requires, limits, weights, "
    "weights_preset, isolation, priority, seed, mode, project, retry, preemptible, preempt_grace_sec, "
    "nodes"
)
LIMIT_FIELDS = "cpu_cores, ram_gb, gpu_count, pids, timeout_sec, no_internet, egress_allow"
JOB_PARAMS = "phase, stack, project, spec, node, pipeline, array, limit, offset, paginate, cursor"
RUN_PARAMS = "phase, stack, project, limit, offset, paginate, cursor"
PREVIEW_PARAMS = "org, subject, user, project, stack"
PREFLIGHT_PARAMS = "stack, project, isolation, cpu_cores, ram_gb, gpu_count, timeout_sec"
SHEL = "unknown stack 'shel'; did you mean 'shell'? known stacks: python, shell, sim-cartpole"


async def problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, await response.get_data(as_text=True)
    assert response.content_type == "application/problem+json"
    body: dict[str, Any] = await response.get_json()
    assert body["code"] == code, body
    return body


async def job_id(client: Any) -> str:
    job = await ok_json(await client.post("/v1/jobs", json={"stack": "shell"}), 202)
    return str(job["job_id"])


# -- unknown body fields -------------------------------------------------------------------


async def test_unknown_top_level_field_lists_the_body_fields(client: Any) -> None:
    response = await client.post("/v1/jobs", json={"stack": "shell", "comand": ["true"]})
    body = await problem(response, 400, "unknown_field")
    message = f"unknown field 'comand'; accepted: {SUBMIT_FIELDS} (did you mean 'command'?)"
    assert body["detail"] == message
    assert body["errors"] == [{"key": "comand", "code": "unknown_field", "message": message}]


async def test_unknown_nested_field_lists_the_nested_model_fields(client: Any) -> None:
    response = await client.post("/v1/jobs", json={"stack": "shell", "limits": {"timeout": 60}})
    body = await problem(response, 400, "unknown_field")
    message = (
        f"unknown field 'limits.timeout'; accepted: {LIMIT_FIELDS} (did you mean 'timeout_sec'?)"
    )
    assert body["detail"] == message
    assert body["errors"] == [
        {"key": "limits.timeout", "code": "unknown_field", "message": message}
    ]


async def test_unknown_field_in_a_list_item_lists_the_item_fields(client: Any) -> None:
    response = await client.post("/v1/jobs", json={"stack": "shell", "inputs": [{"x": 1}]})
    body = await problem(response, 400, "unknown_field")
    message = "unknown field 'inputs.0.x'; accepted: path, ref, type, mode, connection_id"
    assert body["detail"] == message
    assert body["errors"] == [{"key": "inputs.0.x", "code": "unknown_field", "message": message}]


async def test_deeply_nested_and_several_unknown_fields(client: Any) -> None:
    body = {"stack": "shell", "requires": {"gpu": {"min_vram": 8}}, "workspace": {"paht": "/w"}}
    answer = await problem(await client.post("/v1/runs/validate", json=body), 400, "invalid_body")
    gpu = (
        "unknown field 'requires.gpu.min_vram'; accepted: required, min_vram_gb, vendor, "
        "cuda_min (did you mean 'min_vram_gb'?)"
    )
    workspace = (
        "unknown field 'workspace.paht'; accepted: path, ref, type, mode, connection_id "
        "(did you mean 'path'?)"
    )
    assert answer["errors"] == [  # in the order of the model's fields
        {"key": "workspace.paht", "code": "unknown_field", "message": workspace},
        {"key": "requires.gpu.min_vram", "code": "unknown_field", "message": gpu},
    ]
    assert answer["detail"] == f"{workspace}; {gpu}"


async def test_runspec_body_lists_layers_too(client: Any) -> None:
    answer = await problem(
        await client.post("/v1/runs/resolve", json={"stack": "shell", "layer": {}}),
        400,
        "unknown_field",
    )
    assert answer["detail"] == (
        f"unknown field 'layer'; accepted: {SUBMIT_FIELDS}, layers (did you mean 'layers'?)"
    )


async def test_other_errors_keep_their_wording(client: Any) -> None:
    answer = await problem(
        await client.post("/v1/jobs", json={"stack": "shell", "limits": {"pids": "many"}}),
        400,
        "bad_type",  # a string where an integer goes (strict: tests/http/test_strict_scalars.py)
    )
    assert answer["errors"][0]["key"] == "limits.pids"
    assert "accepted" not in answer["detail"]


# -- unknown stacks ------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/v1/jobs", "/v1/runs", "/v1/runs/validate", "/v1/runs/resolve"])
async def test_unknown_stack_suggests_the_close_one(client: Any, path: str) -> None:
    response = await client.post(path, json={"stack": "shel", "command": ["true"]})
    body = await problem(response, 400, "unknown_stack")
    assert body["detail"] == SHEL
    assert body["errors"] == [
        {
            "key": "stack",
            "code": "unknown_stack",
            "message": "no stack named 'shel'; did you mean 'shell'?",
        }
    ]


async def test_unknown_stack_without_a_close_one_lists_the_catalog(client: Any) -> None:
    body = await problem(
        await client.post("/v1/jobs", json={"stack": "tensorflow"}), 400, "unknown_stack"
    )
    assert body["detail"] == "unknown stack 'tensorflow'; known stacks: python, shell, sim-cartpole"
    assert body["errors"][0]["message"] == "no stack named 'tensorflow'"


async def test_stack_routes_and_policy_suggest_too(client: Any) -> None:
    body = await problem(await client.get("/v1/stacks/shel"), 404, "not_found")
    assert body["detail"] == (
        "no stack named 'shel'; did you mean 'shell'? available: python, shell, sim-cartpole"
    )
    preview = await ok_json(await client.get("/v1/policy/preview?stack=shel", headers=ADMIN_H), 200)
    assert preview["stack_error"] == SHEL
    preflight = await ok_json(await client.get("/v1/policy/preflight?stack=shel"), 200)
    assert preflight["stack_error"] == SHEL and preflight["http_status"] == 400


# -- unknown query parameters --------------------------------------------------------------


async def test_status_is_not_a_job_filter(client: Any) -> None:
    await job_id(client)
    body = await problem(await client.get("/v1/jobs?status=failed"), 400, "invalid_query")
    message = f"unknown query parameter 'status'; accepted: {JOB_PARAMS}"
    assert body["detail"] == message
    assert body["errors"] == [{"key": "status", "code": "unknown_parameter", "message": message}]


async def test_known_job_parameters_still_work(client: Any) -> None:
    await job_id(client)
    jobs = await ok_json(await client.get("/v1/jobs?phase=queued&limit=5"), 200)
    assert len(jobs) == 1


# (path with {job} for a job id, the accepted parameters as listed, a typo, its fix)
ROUTES = [
    ("/v1/jobs", JOB_PARAMS, "phse", "phase"),
    ("/v1/runs", RUN_PARAMS, "stak", "stack"),
    ("/v1/nodes", "paginate, cursor, limit", "limt", "limit"),
    ("/v1/pipelines", "limit, offset", "limt", "limit"),
    ("/v1/stacks", "view", "veiw", "view"),
    ("/v1/stacks/shell", "view", "views", "view"),
    ("/v1/admin/audit", "limit, org", "lmit", "limit"),
    ("/v1/auth/tokens", "org_id", "org", "org_id"),
    ("/v1/nodes/join-tokens", "org_id", "orgid", "org_id"),
    ("/v1/policy", "org", "orgs", "org"),
    ("/v1/policy/preview", PREVIEW_PARAMS, "subjet", "subject"),
    ("/v1/policy/preflight", PREFLIGHT_PARAMS, "cpu_core", "cpu_cores"),
    ("/v1/jobs/{job}/logs", "stream, since_seq, limit", "strem", "stream"),
    ("/v1/jobs/{job}/events", "since_seq, token", "since", "since_seq"),
]


@pytest.mark.parametrize(("path", "accepted", "typo", "fix"), ROUTES)
async def test_unknown_parameter_names_the_accepted_ones(
    client: Any, path: str, accepted: str, typo: str, fix: str
) -> None:
    url = path.format(job=await job_id(client)) if "{job}" in path else path
    body = await problem(await client.get(f"{url}?{typo}=1", headers=ADMIN_H), 400, "invalid_query")
    message = f"unknown query parameter {typo!r}; accepted: {accepted} (did you mean {fix!r}?)"
    assert body["detail"] == message
    assert body["errors"] == [{"key": typo, "code": "unknown_parameter", "message": message}]


@pytest.mark.parametrize(
    "path",
    [
        "/v1/jobs?phase=queued&stack=shell&project=&spec=x&node=n&limit=5&offset=0",
        "/v1/jobs?paginate=1&limit=5",
        "/v1/runs?phase=queued&stack=shell&project=p&limit=5&offset=0&paginate=0",
        "/v1/nodes?paginate=1&limit=5",
        "/v1/stacks?view=summary",
        "/v1/stacks/shell?view=launch",
        "/v1/admin/audit?limit=5&org=org_default",
        "/v1/auth/tokens?org_id=org_default",
        "/v1/nodes/join-tokens?org_id=org_default",
        "/v1/policy?org=org_default",
        "/v1/policy/preview?org=org_default&subject=a&user=a&project=p&stack=shell",
        "/v1/policy/preflight?stack=shell&project=p&isolation=none&cpu_cores=1&ram_gb=1"
        "&gpu_count=0&timeout_sec=60",
        "/v1/jobs/{job}/logs?stream=stdout&since_seq=0&limit=5",
    ],
)
async def test_known_parameters_are_accepted(client: Any, path: str) -> None:
    url = path.format(job=await job_id(client)) if "{job}" in path else path
    await ok_json(await client.get(url, headers=ADMIN_H), 200)


async def test_embed_is_a_submit_parameter(client: Any) -> None:
    embed = await client.post("/v1/runs?embed=1", json={"stack": "shell"})
    assert embed.status_code == 202
    grant = (await embed.get_json())["embed"]
    assert grant["token"].startswith("rpem_") and grant["url"].startswith("http")
    assert grant["url"].endswith(f"/embed/e/{grant['token']}")
    typo = await client.post("/v1/runs?embded=1", json={"stack": "shell"})
    body = await problem(typo, 400, "invalid_query")
    assert (
        body["detail"]
        == "unknown query parameter 'embded'; accepted: embed (did you mean 'embed'?)"
    )


async def test_several_unknown_parameters_are_all_named(client: Any) -> None:
    body = await problem(
        await client.get("/v1/jobs?status=x&phase=queued&sort=id"), 400, "invalid_query"
    )
    assert body["detail"] == f"unknown query parameters 'status', 'sort'; accepted: {JOB_PARAMS}"
    assert [e["key"] for e in body["errors"]] == ["status", "sort"]


async def test_a_route_without_parameters_says_so(client: Any) -> None:
    job = await job_id(client)
    body = await problem(await client.get(f"/v1/jobs/{job}?verbose=1"), 400, "invalid_query")
    assert body["detail"] == (
        "unknown query parameter 'verbose'; GET /v1/jobs/<job_id> takes no query parameters"
    )


async def test_token_off_the_events_route_points_at_the_header(client: Any) -> None:
    body = await problem(await client.get("/v1/jobs?token=abc"), 400, "invalid_query")
    assert body["detail"] == (
        f"unknown query parameter 'token'; accepted: {JOB_PARAMS}; "
        "send a token as the header 'Authorization: Bearer <token>'"
    )


async def test_every_route_refuses_unknown_parameters(app: QuartTrio, client: Any) -> None:
    """Every HTTP route but the health probes, static files and the web UI's pages (the
    app in the browser reads their query): 400 (after auth, so a route the admin token may
    not call answers its auth refusal instead)."""
    seen = 0
    for url_rule in app.url_map.iter_rules():
        if getattr(url_rule, "websocket", False) or url_rule.endpoint == "static":
            continue
        if url_rule.endpoint.startswith("ui."):
            continue
        path = re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"x_\1", url_rule.rule)
        for method in sorted(set(url_rule.methods or ()) - {"HEAD", "OPTIONS"}):
            response = await client.open(f"{path}?bogus=1", method=method, headers=ADMIN_H)
            route = f"{method} {url_rule.rule}"
            if url_rule.rule.endswith(("/healthz", "/readyz")):  # probes ignore the query
                assert response.status_code == 200, route
                continue
            declared = doc_of(app.view_functions[url_rule.endpoint])
            assert declared is not None, route
            if declared.rule.need == "user_session":  # the admin token is refused before
                assert response.status_code == 403, route
                continue
            body = await problem(response, 400, "invalid_query")
            assert body["errors"][0]["key"] == "bogus", route
            seen += 1
    assert seen > 40


async def test_auth_and_unknown_routes_answer_first(
    make_settings: Callable[..., Settings], client: Any
) -> None:
    assert (await client.get("/v1/nope?status=x")).status_code == 404
    app = create_app(make_settings(auth="required"))
    async with app.test_app():
        anonymous = app.test_client()
        await problem(await anonymous.get("/v1/jobs?status=failed"), 401, "unauthorized")
        await problem(
            await anonymous.get("/v1/jobs?status=failed", headers=ADMIN_H), 400, "invalid_query"
        )


async def test_a_streaming_upload_is_refused_without_hanging(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """Over a socket: the 400 comes before the route reads the body, and the server drops
    the rest of it instead of leaving the connection stuck."""
    server = await start_server(nursery, e2e_settings(tmp_path / "server", database_url="memory"))
    try:
        async with server.client() as http:
            with trio.fail_after(20):
                response = await http.put(
                    "/v1/artifacts/k/x?overwrite=1", content=b"\0" * (8 * 1024 * 1024)
                )
            assert response.status_code == 400
            assert response.json()["detail"] == (
                "unknown query parameter 'overwrite'; "
                "PUT /v1/artifacts/<anykey:key> takes no query parameters"
            )
            store = server.app.extensions["runplane"].artifacts
            assert await store.stat("k/x") is None
    finally:
        server.stop.set()
        await server.done.wait()
