"""The OpenAPI 3.1.0 document (docs/api.md "OpenAPI"): it validates, it covers every
route of the app's url map and nothing else, each route's request body is the model the
route parses, and it is served at /openapi.json and /v1/openapi.json."""

from __future__ import annotations

import inspect
import re
from typing import Any

from openapi_spec_validator import validate
from quart_trio import QuartTrio

from runplane.auth.rules import methods_of
from runplane.http.openapi.document import API_VERSION, LEFT_OUT, build, openapi_path
from runplane.http.openapi.route_doc import doc_of


def operations(app: QuartTrio) -> set[tuple[str, str]]:
    """(method, OpenAPI path) of every HTTP route of the app (not the agents' WebSocket,
    not Quart's static files)."""
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint in LEFT_OUT or getattr(rule, "websocket", False):
            continue
        for method in methods_of(rule):
            found.add((method.lower(), openapi_path(rule.rule)))
    return found


async def test_the_document_validates_and_covers_every_route(app: QuartTrio) -> None:
    document = build(app)
    validate(document)  # openapi-spec-validator: OpenAPI 3.1.0 and JSON Schema 2020-12
    assert document["openapi"] == "3.1.0" and document["info"]["version"] == API_VERSION
    documented = {(method, path) for path, item in document["paths"].items() for method in item}
    assert documented == operations(app)
    ids = [op["operationId"] for item in document["paths"].values() for op in item.values()]
    assert len(ids) == len(set(ids))


async def test_schemas_are_components_referenced_not_inlined(app: QuartTrio) -> None:
    document = build(app)
    schemas = document["components"]["schemas"]
    submit = document["paths"]["/v1/jobs"]["post"]
    body = submit["requestBody"]["content"]["application/json"]["schema"]
    assert body == {"$ref": "#/components/schemas/SubmitJobBody"}
    answer = submit["responses"]["202"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/JobSubmitted"}
    assert set(schemas["SubmitJobBody"]["required"]) == {"stack"}
    assert schemas["Job"]["properties"]["phase"]["enum"][0] == "queued"
    # every $ref points at a component
    refs = set(
        re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', str(document).replace("'", '"'))
    )
    assert refs and refs <= set(schemas)
    # errors are problems, by status
    problem = {"$ref": "#/components/schemas/ProblemDetails"}
    for status in ("400", "401", "403", "413", "422", "503"):
        assert (
            submit["responses"][status]["content"]["application/problem+json"]["schema"] == problem
        )
    assert "429" in submit["responses"]
    get_job = document["paths"]["/v1/jobs/{job_id}"]["get"]
    assert "404" in get_job["responses"] and "422" not in get_job["responses"]


async def test_security_follows_the_auth_rule_table(app: QuartTrio) -> None:
    document = build(app)
    paths = document["paths"]
    assert paths["/healthz"]["get"]["security"] == []
    assert paths["/v1/jobs"]["post"]["security"] == [{"bearer": []}]
    assert {"queryToken": []} in paths["/v1/jobs/{job_id}/events"]["get"]["security"]
    teleop = paths["/v1/jobs/{job_id}/streams/{name}/teleop"]["post"]["security"]
    assert {"streamTicket": []} in teleop
    assert {"embedToken": []} in paths["/v1/jobs/{job_id}/logs"]["get"]["security"]
    assert set(document["components"]["securitySchemes"]) == {
        "bearer",
        "queryToken",
        "streamTicket",
        "shareToken",
        "embedToken",
    }


def _parsed_models(source: str) -> set[str]:
    """The model names a route module hands to parse_body (or its optional-body helper)."""
    return set(re.findall(r"(?:parse_body|_optional_body)\(\s*(?:\w+\.)?(\w+)", source))


async def test_each_documented_body_is_the_model_the_route_parses(app: QuartTrio) -> None:
    for endpoint, view in app.view_functions.items():
        route = doc_of(view)
        if route is None:
            assert endpoint in LEFT_OUT or endpoint == "agents.connect", endpoint
            continue
        own = inspect.getsource(view)
        module = inspect.getsource(inspect.getmodule(view))  # type: ignore[arg-type]
        parses = "parse_body(" in own or "_optional_body(" in own or "_mint_body(" in own
        if route.body is None:
            assert not parses, f"{endpoint} parses a body its @doc does not name"
        else:
            assert parses, f"{endpoint} names a body it does not parse"
            assert route.body.__name__ in _parsed_models(module), endpoint


async def test_the_document_is_served_at_both_paths(client: Any) -> None:
    first = await client.get("/openapi.json")
    second = await client.get("/v1/openapi.json")
    assert first.status_code == second.status_code == 200
    body = await first.get_json()
    assert body == await second.get_json()
    assert body["paths"]["/v1/jobs/{job_id}"]["get"]["operationId"] == "jobs_get_job"
