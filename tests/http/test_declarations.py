"""A route is declared in one place (``@doc``): what derives from the declarations (the
MCP tool list, the rule table) and the strict check of the answers against them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from quart_trio import QuartTrio

from runplane.auth.rules import PUBLIC
from runplane.http.app import create_app
from runplane.http.mcp.tools import JobArgs, ListJobsArgs, LogsArgs, NoArgs
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.openapi.route_doc import RouteDoc, declared_routes, tools_of
from runplane.http.strict import drift
from runplane.jobs.spec import SubmitJobBody

TOOL_ROUTES = {
    "list_stacks": ("GET", "/v1/stacks"),
    "submit_job": ("POST", "/v1/jobs"),
    "preflight_job": ("POST", "/v1/policy/preflight"),
    "get_job": ("GET", "/v1/jobs/<job_id>"),
    "list_jobs": ("GET", "/v1/jobs"),
    "get_logs": ("GET", "/v1/jobs/<job_id>/logs"),
    "list_artifacts": ("GET", "/v1/jobs/<job_id>/artifacts"),
    "cancel_job": ("POST", "/v1/jobs/<job_id>/cancel"),
    "rerun_job": ("POST", "/v1/jobs/<job_id>/rerun"),
    "get_nodes": ("GET", "/v1/nodes"),
    "entitlements": ("GET", "/v1/me/entitlements"),
}


def test_the_tools_are_their_routes(make_settings: Callable[..., Any]) -> None:
    tools = tools_of(create_app(make_settings()))
    assert {name: (t.method, t.rule) for name, t in tools.items()} == TOOL_ROUTES
    logs = tools["get_logs"]
    args = LogsArgs(job_id="job_a/b", stream=None, limit=5)
    assert logs.path(args) == "/v1/jobs/job_a%2Fb/logs"  # path parameters are quoted
    assert logs.query(args) == {"since_seq": 0, "limit": 5}  # None dropped, defaults kept
    assert logs.body(args) is None
    assert tools["list_jobs"].query(ListJobsArgs()) == {"limit": 20}
    assert tools["list_stacks"].query(NoArgs()) == {}
    cancel = tools["cancel_job"]
    assert cancel.query(JobArgs(job_id="job_x")) is None
    assert cancel.body(JobArgs(job_id="job_x")) is None  # the path takes every argument
    submit = tools["submit_job"]
    body = SubmitJobBody.model_validate({"stack": "sim-cartpole", "priority": 3})
    assert submit.path(body) == "/v1/jobs"
    assert submit.body(body) == {"stack": "sim-cartpole", "priority": 3}  # as given


def test_every_route_is_declared(make_settings: Callable[..., Any]) -> None:
    routes = declared_routes(create_app(make_settings()))
    assert len(routes) > 100
    assert [f"{d.method} {d.rule}" for d in routes if d.route is None] == []


ONE_JOB = {"job_id": "job_1", "stack": "sim-cartpole", "phase": "queued"}


def test_drift_names_each_field_no_model_names() -> None:
    route = RouteDoc("One job", rule=PUBLIC, response=v.Job)
    assert drift(route, ONE_JOB) is None
    found = drift(
        route,
        {
            **ONE_JOB,
            "colour": "red",
            "streams": [{"name": "s", "kind": "data", "count": 1, "fps": 3}],
        },
    )
    assert found == "fields Job does not name: colour, streams[0].fps"
    wrong = drift(route, {**ONE_JOB, "phase": "sleeping"})
    assert wrong is not None and wrong.startswith("not a Job (phase:")


def test_drift_takes_a_list_or_its_page() -> None:
    route = RouteDoc("Jobs", rule=PUBLIC, response=v.Job, many=True, page=v.JobPage)
    assert drift(route, [ONE_JOB]) is None
    assert drift(route, {"items": [ONE_JOB], "next_cursor": "", "has_more": False}) is None
    found = drift(route, [{**ONE_JOB, "extra": 1}])
    assert found is not None and "[0].extra" in found


async def test_a_drifted_answer_is_a_500_naming_the_route_and_field(
    make_settings: Callable[..., Any],
) -> None:
    """tests/conftest.py switches the strict check on for every test."""
    app: QuartTrio = create_app(make_settings())

    @app.get("/v1/drifted")
    @doc("Drifted", v.Deleted, rule=PUBLIC)
    async def drifted() -> dict[str, Any]:
        return {"deleted": "x", "surprise": True}

    async with app.test_app():
        response = await app.test_client().get("/v1/drifted")
    assert response.status_code == 500
    body = await response.get_json()
    assert body["code"] == "answer_drift"
    assert "GET /v1/drifted" in body["detail"] and "surprise" in body["detail"]
