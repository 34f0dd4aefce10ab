"""Jobs API without agents: validation, views, idempotency, listing, cancel, priority, rerun."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runplane.actors.placement import NO_NODES
from runplane.http.app import create_app
from runplane.jobs.spec import SubmitJobBody, resolve
from runplane.settings import Settings
from runplane.stacks import load_catalog

UNAVAILABLE = """
name = "retired"
version = "1"
image = "debian:bookworm-slim"
default_command = ["true"]
unavailable = true
"""


async def submit(client: Any, body: dict[str, Any], **headers: str) -> Any:
    return await client.post("/v1/jobs", json=body, headers=headers)


async def test_submit_returns_queued_job_view(client: Any) -> None:
    response = await submit(client, {"stack": "shell", "command": ["echo", "hi"], "seed": 7})
    assert response.status_code == 202
    job = await response.get_json()
    assert job["job_id"].startswith("job_")
    assert job["phase"] == "queued"
    assert job["stack"] == "shell" and job["image"] == "debian:bookworm-slim"
    assert job["priority"] == 100 and job["mode"] == "run" and job["seed"] == 7
    assert job["org_id"] == "org_default" and job["attempts"] == 0
    assert job["spec"]["command"] == ["echo", "hi"]
    assert job["wait_reason"].startswith("no node is connected")
    assert len(job["spec_hash"]) == 64
    assert job["created_at"].endswith("Z") and job["started_at"] is None


async def test_unknown_stack_is_400(client: Any) -> None:
    response = await submit(client, {"stack": "nope"})
    assert response.status_code == 400
    body = await response.get_json()
    assert body["code"] == "unknown_stack"
    assert body["errors"][0]["key"] == "stack"


async def test_unavailable_stack_is_422(
    make_settings: Callable[..., Settings], tmp_path: Path
) -> None:
    stacks = tmp_path / "stacks"
    stacks.mkdir()
    (stacks / "retired.toml").write_text(UNAVAILABLE)
    app = create_app(make_settings(stacks_dir=str(stacks)))
    async with app.test_app():
        response = await submit(app.test_client(), {"stack": "retired"})
    assert response.status_code == 422
    assert (await response.get_json())["code"] == "stack_unavailable"


async def test_bad_config_is_422_with_run_problems(client: Any) -> None:
    response = await submit(
        client, {"stack": "sim-cartpole", "config": {"episodes": -5, "colour": "red"}}
    )
    assert response.status_code == 422
    body = await response.get_json()
    assert body["code"] == "invalid_config"
    codes = {(e["key"], e["code"]) for e in body["errors"]}
    assert ("config.episodes", "out_of_range") in codes
    assert ("config.colour", "unknown_key") in codes


@pytest.mark.parametrize(
    ("body", "key"),
    [
        ({"stack": "shell", "comand": ["x"]}, "comand"),
        ({"stack": "shell", "limits": {"cpus": 2}}, "limits.cpus"),
        ({"stack": "shell", "priority": "high"}, "priority"),
        ({"stack": "shell", "mode": "batch"}, "mode"),
        ({"command": ["true"]}, "stack"),
        ({"stack": "shell", "seed": -1}, "seed"),
    ],
)
async def test_bad_body_is_400_naming_the_field(
    client: Any, body: dict[str, Any], key: str
) -> None:
    response = await submit(client, body)
    assert response.status_code == 400
    assert (await response.get_json())["errors"][0]["key"] == key


async def test_unknown_weight_is_422(client: Any) -> None:
    response = await submit(client, {"stack": "shell", "weights": {"speed": 1.0}})
    assert response.status_code == 422
    assert (await response.get_json())["errors"][0]["key"].startswith("weights")


async def test_secret_env_values_are_redacted(client: Any) -> None:
    env = {"HF_TOKEN": "hf_abc", "DB_PASSWORD": "pw", "AWS_SECRET_ACCESS_KEY": "k", "LEVEL": "3"}
    job = await (await submit(client, {"stack": "shell", "env": env})).get_json()
    assert job["spec"]["env"] == {
        "HF_TOKEN": "[redacted]",
        "DB_PASSWORD": "[redacted]",
        "AWS_SECRET_ACCESS_KEY": "[redacted]",
        "LEVEL": "3",
    }
    listed = await (await client.get("/v1/jobs")).get_data(as_text=True)
    assert "hf_abc" not in listed and 'pw"' not in listed


def test_spec_hash_is_deterministic_and_covers_what_reproduces() -> None:
    catalog = load_catalog()
    body = {"stack": "sim-cartpole", "config": {"episodes": 3}, "seed": 11}
    first = resolve(SubmitJobBody.model_validate(body), catalog)
    again = resolve(SubmitJobBody.model_validate(dict(reversed(list(body.items())))), catalog)
    assert first.spec_hash == again.spec_hash
    other_seed = resolve(SubmitJobBody.model_validate({**body, "seed": 12}), catalog)
    assert other_seed.spec_hash != first.spec_hash
    priority_only = resolve(SubmitJobBody.model_validate({**body, "priority": 5}), catalog)
    assert priority_only.spec_hash == first.spec_hash  # priority does not change the run


async def test_idempotency_key(client: Any) -> None:
    body = {"stack": "shell", "command": ["true"], "seed": 1}
    first = await submit(client, body, **{"Idempotency-Key": "abc-123"})
    again = await submit(client, body, **{"Idempotency-Key": "abc-123"})
    assert first.status_code == again.status_code == 202
    assert (await first.get_json())["job_id"] == (await again.get_json())["job_id"]
    other = await submit(client, {**body, "seed": 2}, **{"Idempotency-Key": "abc-123"})
    assert other.status_code == 409
    assert (await other.get_json())["code"] == "idempotency_conflict"
    listed = await (await client.get("/v1/jobs")).get_json()
    assert len(listed) == 1
    bad = await submit(client, body, **{"Idempotency-Key": "has space"})
    assert bad.status_code == 400


async def test_list_filters_and_bad_phase(client: Any) -> None:
    a = await (await submit(client, {"stack": "shell", "project": "alpha", "seed": 1})).get_json()
    await submit(client, {"stack": "python", "project": "beta"})
    await submit(client, {"stack": "shell", "project": "alpha", "seed": 1})
    by_stack = await (await client.get("/v1/jobs?stack=python")).get_json()
    assert [j["stack"] for j in by_stack] == ["python"]
    by_project = await (await client.get("/v1/jobs?project=alpha")).get_json()
    assert len(by_project) == 2
    cohort = await (await client.get(f"/v1/jobs?spec={a['spec_hash']}")).get_json()
    assert len(cohort) == 2 and {j["spec_hash"] for j in cohort} == {a["spec_hash"]}
    queued = await (await client.get("/v1/jobs?phase=queued")).get_json()
    assert len(queued) == 3
    newest_first = await (await client.get("/v1/jobs")).get_json()
    assert [j["job_id"] for j in newest_first] == sorted(
        (j["job_id"] for j in newest_first), reverse=True
    )
    bad = await client.get("/v1/jobs?phase=sleeping")
    assert bad.status_code == 400
    assert (await bad.get_json())["errors"][0]["key"] == "phase"
    assert (await client.get("/v1/jobs?limit=0")).status_code == 400
    offset = await (await client.get("/v1/jobs?limit=1&offset=1")).get_json()
    assert [j["job_id"] for j in offset] == [newest_first[1]["job_id"]]


async def test_cursor_pages_never_skip_or_repeat_while_jobs_arrive(client: Any) -> None:
    for i in range(7):
        await submit(client, {"stack": "shell", "seed": i})
    seen: list[str] = []
    page = await (await client.get("/v1/jobs?paginate=1&limit=3")).get_json()
    assert page["total"] == 7 and page["has_more"]
    while True:
        seen += [j["job_id"] for j in page["items"]]
        await submit(client, {"stack": "shell"})  # new jobs land before the cursor: not in it
        if not page["has_more"]:
            assert page["next_cursor"] == ""
            break
        page = await (await client.get(f"/v1/jobs?limit=3&cursor={page['next_cursor']}")).get_json()
    assert len(seen) == 7 == len(set(seen))
    assert seen == sorted(seen, reverse=True)
    bad = await client.get("/v1/jobs?cursor=garbage")
    assert bad.status_code == 400


async def test_get_unknown_job_is_404(client: Any) -> None:
    for path in (
        "/v1/jobs/job_nope",
        "/v1/jobs/job_nope/logs",
        "/v1/jobs/job_nope/events",
        "/v1/jobs/job_nope/artifacts",
    ):
        response = await client.get(path)
        assert response.status_code == 404, path
        assert (await response.get_json())["code"] == "not_found"
    for path in ("/v1/jobs/job_nope/cancel", "/v1/jobs/job_nope/rerun"):
        assert (await client.post(path)).status_code == 404
    assert (
        await client.post("/v1/jobs/job_nope/priority", json={"priority": 1})
    ).status_code == 404


async def test_cancel_queued_then_terminal(client: Any) -> None:
    job = await (await submit(client, {"stack": "shell"})).get_json()
    first = await (await client.post(f"/v1/jobs/{job['job_id']}/cancel")).get_json()
    assert first["phase"] == "cancelled"
    assert first["cancelled"] is True and first["killed_on_node"] is False
    assert first["finished_at"] is not None
    again = await (await client.post(f"/v1/jobs/{job['job_id']}/cancel")).get_json()
    assert again["cancelled"] is False and again["phase"] == "cancelled"
    events = await (await client.get(f"/v1/jobs/{job['job_id']}/events")).get_data(as_text=True)
    assert "event: phase" in events and '"phase":"cancelled"' in events


async def test_priority_and_rerun(client: Any) -> None:
    job = await (await submit(client, {"stack": "shell", "seed": 3})).get_json()
    raised = await client.post(f"/v1/jobs/{job['job_id']}/priority", json={"priority": 500})
    assert raised.status_code == 200
    assert (await raised.get_json())["priority"] == 500
    bad = await client.post(f"/v1/jobs/{job['job_id']}/priority", json={"priority": "max"})
    assert bad.status_code == 400
    rerun = await client.post(f"/v1/jobs/{job['job_id']}/rerun")
    assert rerun.status_code == 202
    second = await rerun.get_json()
    assert second["job_id"] != job["job_id"]
    assert second["spec_hash"] == job["spec_hash"] and second["seed"] == 3
    # the rerun links back to its source (stored: every read says so), the source to nothing
    assert second["rerun_of"] == job["job_id"] and job["rerun_of"] is None
    fetched = await (await client.get(f"/v1/jobs/{second['job_id']}")).get_json()
    assert fetched["rerun_of"] == job["job_id"]
    listed = {j["job_id"]: j["rerun_of"] for j in await (await client.get("/v1/jobs")).get_json()}
    assert listed == {job["job_id"]: None, second["job_id"]: job["job_id"]}
    third = await (await client.post(f"/v1/jobs/{second['job_id']}/rerun")).get_json()
    assert third["rerun_of"] == second["job_id"]  # the job it was made from, not the first


async def test_a_queued_jobs_event_stream_says_why_it_waits(app: Any, client: Any) -> None:
    """Without a node, the SSE stream of a queued job carries the wait reason as a
    ``phase`` event (the SSE event kinds stay log, metric and phase). A queued job nobody
    follows is a row, not an actor: the follower activates it, and placement tells the
    active actor its reason, which it stores."""
    import trio

    from runplane.jobs import repo

    job = await (await submit(client, {"stack": "shell"})).get_json()
    assert job["attempt"] == 0 and job["attempts"] == 0
    store = app.extensions["runplane"].store
    texts: list[str] = []

    async def follow() -> None:
        response = await client.get(f"/v1/jobs/{job['job_id']}/events")
        texts.append(await response.get_data(as_text=True))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(follow)
        with trio.fail_after(20):  # placement tells the job actor, which stores the event
            while not any(  # noqa: ASYNC110 (polls the store: no event to wait on)
                '"reason"' in e.data for e in await repo.events_after(store, job["job_id"], 0)
            ):
                await trio.sleep(0.01)
        await client.post(f"/v1/jobs/{job['job_id']}/cancel")  # so the stream ends
    frames = [f.split("\n") for f in texts[0].split("\n\n") if f]
    assert [f[1] for f in frames] == ["event: phase"] * 3
    events = [json.loads(f[2].removeprefix("data: ")) for f in frames]
    assert [(e["phase"], e.get("reason")) for e in events] == [
        ("queued", None),
        ("queued", NO_NODES),
        ("cancelled", None),
    ]
    assert [f[0] for f in frames] == [f"id: {e['seq']}" for e in events]


async def test_logs_of_fresh_job_are_empty(client: Any) -> None:
    job = await (await submit(client, {"stack": "shell"})).get_json()
    logs = await (await client.get(f"/v1/jobs/{job['job_id']}/logs")).get_json()
    assert logs == {"logs": [], "metrics": [], "phase": "queued", "next_seq": 0}
    assert (await client.get(f"/v1/jobs/{job['job_id']}/logs?stream=bogus")).status_code == 400
