"""Session routes over the app (no node: the pod job stays queued, the session launching):
validation, views, keepalive, delete freeing the quota, 409/501/503, audit."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, ok_json


def service(name: str, *needs: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "needs": list(needs),
        "stack": "shell",
        "command": ["sleep", "60"],
        **extra,
    }


BODY = {
    "name": "sim-and-ctrl",
    "project": "robots",
    "idle_ttl_sec": 120,
    "pod": {
        "services": [
            service("sim", health={"command": ["test", "-f", "ready"]}, cpu_cores=2, ram_gb=1),
            service("ctrl", "sim", stack="python", command=["python", "-c", "pass"], cpu_cores=1),
        ]
    },
    "actions": [{"id": "reset", "label": "Reset the sim"}],
}


async def live_jobs(client: Any) -> int:
    page = await ok_json(await client.get("/v1/jobs?paginate=1&phase=queued"), 200)
    return int(page["total"])


async def test_create_makes_one_session_job_sized_for_the_pod(client: Any) -> None:
    view = await ok_json(await client.post("/v1/sessions", json=BODY), 202)
    assert view["id"].startswith("ses_") and view["job_id"].startswith("job_")
    assert (view["phase"], view["name"], view["project"]) == ("launching", "sim-and-ctrl", "robots")
    assert view["idle_ttl_sec"] == 120 and view["teleop_stream"] == "control"
    assert view["actions"] == BODY["actions"]
    assert view["services"] == [
        {"name": "sim", "stack": "shell", "image": "debian:bookworm-slim", "needs": []},
        {"name": "ctrl", "stack": "python", "image": "python:3.11-slim", "needs": ["sim"]},
    ]
    assert view["created_at"] == view["last_keepalive"] and view["started_at"] is None
    job = await ok_json(await client.get(f"/v1/jobs/{view['job_id']}"), 200)
    assert (job["mode"], job["session_id"], job["phase"]) == ("session", view["id"], "queued")
    assert job["spec"]["resources"]["cpu_cores"] == 3 and job["spec"]["resources"]["ram_gb"] == 1
    again = await ok_json(await client.get(f"/v1/sessions/{view['id']}"), 200)
    assert again == view
    listed = await ok_json(await client.get("/v1/sessions"), 200)
    assert [s["id"] for s in listed] == [view["id"]]
    assert "services" not in listed[0] and "actions" not in listed[0]


async def test_a_services_image_is_resolved_and_the_default_ttl_applies(client: Any) -> None:
    # an image is resolved at its registry (tests/images/test_pod_images.py): one that
    # cannot be reached is a 503 and nothing is created
    before = await live_jobs(client)
    body = {"pod": {"services": [service("gpu", image="registry.invalid/nvidia/pytorch:24.01")]}}
    problem = await ok_json(await client.post("/v1/sessions", json=body), 503)
    assert (
        problem["code"] == "registry_unavailable" and "pod.services[0].image" in problem["detail"]
    )
    assert await live_jobs(client) == before
    plain = {"pod": {"services": [service("gpu")]}}
    view = await ok_json(await client.post("/v1/sessions", json=plain), 202)
    assert view["services"][0]["image"] == "debian:bookworm-slim"  # the stack's, as declared
    assert view["idle_ttl_sec"] == 300


async def test_invalid_pods_are_400_and_unusable_stacks_422_naming_the_service(
    client: Any,
) -> None:
    before = await live_jobs(client)
    for pod, code in (
        ({"services": [service("a", "b"), service("b", "a")]}, "cycle"),
        ({"services": [service("a", "ghost")]}, "unknown_dependency"),
        ({"services": [service("a"), service("a")]}, "duplicate_name"),
    ):
        problem = await ok_json(await client.post("/v1/sessions", json={"pod": pod}), 400)
        assert problem["code"] == "invalid_pod"
        assert [e["code"] for e in problem["errors"]] == [code]
    for body in ({}, {"pod": {}}, {"pod": {"services": []}}):
        assert (await client.post("/v1/sessions", json=body)).status_code == 400
    problem = await ok_json(
        await client.post(
            "/v1/sessions", json={"pod": {"services": [service("sim"), service("x", stack="nope")]}}
        ),
        422,
    )
    assert problem["code"] == "unknown_stack"
    assert problem["errors"][0]["key"] == "pod.services[1].stack"
    assert "'x'" in problem["detail"]
    bare = {"pod": {"services": [{"name": "noop", "image": "alpine"}]}}
    problem = await ok_json(await client.post("/v1/sessions", json=bare), 422)
    assert problem["code"] == "no_command"
    assert await live_jobs(client) == before
    assert await ok_json(await client.get("/v1/sessions"), 200) == []


async def test_keepalive_refreshes_and_delete_stops_then_keepalive_is_409(client: Any) -> None:
    view = await ok_json(await client.post("/v1/sessions", json=BODY), 202)
    sid = view["id"]
    kept = await ok_json(await client.post(f"/v1/sessions/{sid}/keepalive"), 200)
    assert kept["last_keepalive"] >= view["last_keepalive"] and kept["phase"] == "launching"
    stopped = await ok_json(await client.delete(f"/v1/sessions/{sid}"), 200)
    assert stopped["phase"] == "stopped" and stopped["stopped_at"]
    job = await ok_json(await client.get(f"/v1/jobs/{view['job_id']}"), 200)
    assert job["phase"] == "cancelled"
    problem = await ok_json(await client.post(f"/v1/sessions/{sid}/keepalive"), 409)
    assert problem["code"] == "not_live"
    again = await ok_json(await client.delete(f"/v1/sessions/{sid}"), 200)
    assert again["phase"] == "stopped"
    trail = await ok_json(await client.get("/v1/admin/audit", headers=ADMIN_H), 200)
    actions = {r["action"] for r in trail if r["resource_id"] == sid}
    assert actions == {"sessions:create", "sessions:delete"}


async def test_signal_is_501_after_the_404(client: Any) -> None:
    view = await ok_json(await client.post("/v1/sessions", json=BODY), 202)
    problem = await ok_json(await client.post(f"/v1/sessions/{view['id']}/signal"), 501)
    assert problem["code"] == "not_implemented"
    assert (await client.post("/v1/sessions/ses_nope/signal")).status_code == 404
    assert (await client.post("/v1/sessions/ses_nope/keepalive")).status_code == 404
    assert (await client.delete("/v1/sessions/ses_nope")).status_code == 404


async def test_the_quota_counts_sessions_and_delete_frees_it(client: Any) -> None:
    put = await client.put("/v1/policy", json={"org": {"max_concurrent_org": 1}}, headers=ADMIN_H)
    assert put.status_code == 200, await put.get_data()
    first = await ok_json(await client.post("/v1/sessions", json=BODY), 202)
    refused = await ok_json(await client.post("/v1/sessions", json=BODY), 429)
    assert refused["code"] == "quota_exceeded"
    job = await client.post("/v1/jobs", json={"stack": "shell"})
    assert job.status_code == 429  # the session holds the slot
    await ok_json(await client.delete(f"/v1/sessions/{first['id']}"), 200)
    await ok_json(await client.post("/v1/sessions", json=BODY), 202)
    assert len(await ok_json(await client.get("/v1/sessions"), 200)) == 2


async def test_disabled_sessions_answer_503(make_settings: Callable[..., Settings]) -> None:
    app = create_app(make_settings(disable="sessions"))
    async with app.test_app():
        client = app.test_client()
        for method, url, body in (
            ("POST", "/v1/sessions", BODY),
            ("GET", "/v1/sessions", None),
            ("GET", "/v1/sessions/ses_x", None),
            ("DELETE", "/v1/sessions/ses_x", None),
            ("POST", "/v1/sessions/ses_x/keepalive", None),
            ("POST", "/v1/sessions/ses_x/signal", None),
        ):
            response = await client.open(url, method=method, json=body)
            assert response.status_code == 503, url


async def test_the_example_in_the_docs_is_accepted(client: Any) -> None:
    text = (Path(__file__).parents[2] / "docs" / "sessions.md").read_text()
    example = json.loads(text.split("```json", 1)[1].split("```", 1)[0])
    view = await ok_json(await client.post("/v1/sessions", json=example), 202)
    assert [s["name"] for s in view["services"]] == ["sim", "controller"]
    assert view["teleop_stream"] == "control" and view["actions"] == example["actions"]
    job = await ok_json(await client.get(f"/v1/jobs/{view['job_id']}"), 200)
    assert job["spec"]["resources"]["cpu_cores"] == 2  # two 1-core services


async def test_a_pod_job_cannot_be_rerun_outside_its_session(client: Any) -> None:
    view = await ok_json(await client.post("/v1/sessions", json=BODY), 202)
    problem = await ok_json(await client.post(f"/v1/jobs/{view['job_id']}/rerun"), 409)
    assert problem["code"] == "session_job" and view["id"] in problem["detail"]
