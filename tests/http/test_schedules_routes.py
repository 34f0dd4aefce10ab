"""``/v1/schedules`` over the app with its actor tree on a real store, in real time (an
interval of 1 s; waits bounded): occurrences create jobs as the creator, ``forbid`` skips
while the previous job is live, suspend and resume, PATCH and DELETE, problems naming the
field, another org's id 404, a revoked creator's token recorded as an error. The timing
(exactly once, restarts, downtime) under trio's clock: tests/actors/test_scheduler.py."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
import trio
from quart_trio import QuartTrio

from tests.auth.support import ADMIN_H, World, build_world, store_of

JOB = {"stack": "shell", "command": ["true"], "env": {"API_TOKEN": "plain-token-value-123"}}


@pytest.fixture
def app(required_app: QuartTrio) -> QuartTrio:
    return required_app


async def until(
    client: Any, path: str, headers: dict[str, str], check: Callable[[Any], bool]
) -> Any:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        view = await (await client.get(path, headers=headers)).get_json()
        if check(view):
            return view
        await trio.sleep(0.1)
    raise AssertionError(f"not within 20 s: {path} -> {view}")


async def world_of(app: QuartTrio) -> tuple[Any, World]:
    client = app.test_client()
    return client, await build_world(client, store_of(app))


async def test_an_interval_creates_jobs_as_its_creator_and_forbid_skips_a_live_one(
    app: QuartTrio,
) -> None:
    client, world = await world_of(app)
    member = world.headers("member")
    made = await client.post(
        "/v1/schedules",
        json={"name": "nightly", "every": "1s", "job": JOB, "concurrency": "forbid"},
        headers=member,
    )
    assert made.status_code == 201, await made.get_data()
    view = await made.get_json()
    sid = view["schedule_id"]
    assert view["every"] == "1s" and view["next_run_at"] and view["runs"] == []
    assert view["job"]["env"]["API_TOKEN"] == "[redacted]"
    # no node: the first job stays queued (live), so the next occurrences are skipped
    seen = await until(
        client,
        f"/v1/schedules/{sid}",
        member,
        lambda v: (
            [r["outcome"] for r in v["runs"]][-1:] == ["created"]
            and "skipped" in [r["outcome"] for r in v["runs"]]
        ),
    )
    created = [r for r in seen["runs"] if r["outcome"] == "created"]
    assert len(created) == 1 and seen["last_run_at"] is not None
    skipped = next(r for r in seen["runs"] if r["outcome"] == "skipped")
    assert created[0]["job_id"] in skipped["detail"] and "forbid" in skipped["detail"]
    job = await (await client.get(f"/v1/jobs/{created[0]['job_id']}", headers=member)).get_json()
    assert job["org_id"] == world.org_a and job["phase"] == "queued"
    assert job["spec"]["env"]["API_TOKEN"] == "[redacted]"
    raw = await store_of(app).fetchone("SELECT body FROM schedules WHERE id = ?", (sid,))
    assert raw is not None and "plain-token-value-123" not in raw["body"]  # sealed at rest

    # suspend: no next run; resume: one again; DELETE: gone
    paused = await client.patch(f"/v1/schedules/{sid}", json={"suspend": True}, headers=member)
    assert paused.status_code == 200 and (await paused.get_json())["next_run_at"] is None
    resumed = await client.patch(
        f"/v1/schedules/{sid}",
        json={"suspend": False, "cron": "0 3 * * *", "timezone": "Europe/Berlin"},
        headers=member,
    )
    after = await resumed.get_json()
    assert after["cron"] == "0 3 * * *" and after["every"] is None and after["next_run_at"]
    listed = await (await client.get("/v1/schedules", headers=member)).get_json()
    assert [s["schedule_id"] for s in listed] == [sid]
    assert (
        await (await client.get("/v1/schedules", headers=world.headers("wrong_org"))).get_json()
        == []
    )
    gone = await client.delete(f"/v1/schedules/{sid}", headers=member)
    assert gone.status_code == 200
    assert (await client.get(f"/v1/schedules/{sid}", headers=member)).status_code == 404


@pytest.mark.parametrize(
    ("body", "status", "key"),
    [
        ({"name": "x", "job": JOB}, 422, "cron"),
        ({"name": "x", "every": "1s", "cron": "* * * * *", "job": JOB}, 422, "cron"),
        ({"name": "x", "cron": "61 * * * *", "job": JOB}, 422, "cron"),
        ({"name": "x", "cron": "* * * *", "job": JOB}, 422, "cron"),
        ({"name": "x", "every": "soon", "job": JOB}, 422, "every"),
        ({"name": "x", "every": "0s", "job": JOB}, 422, "every"),
        ({"name": "x", "every": "1m", "timezone": "Mars/Base", "job": JOB}, 422, "timezone"),
        ({"name": "x", "every": "1m"}, 422, "job"),
        ({"name": "x", "every": "1m", "job": {"stack": "nope"}}, 400, "job.stack"),
        (
            {"name": "x", "every": "1m", "job": {"stack": "shell", "env": {"T": "${secrets.NO}"}}},
            422,
            "job.env.T",
        ),
        ({"name": "x", "every": "1m", "job": JOB, "concurrency": "sometimes"}, 400, "concurrency"),
        ({"every": "1m", "job": JOB}, 400, "name"),
    ],
)
async def test_bad_schedules_are_problems_naming_the_field(
    app: QuartTrio, body: dict[str, Any], status: int, key: str
) -> None:
    client, world = await world_of(app)
    answer = await client.post("/v1/schedules", json=body, headers=world.headers("member"))
    assert answer.status_code == status, await answer.get_data()
    problem = await answer.get_json()
    assert key in [e["key"] for e in problem["errors"]], problem


async def test_a_revoked_creator_token_is_an_error_on_the_run_not_a_job(app: QuartTrio) -> None:
    client, world = await world_of(app)
    member = world.headers("member")
    made = await client.post(
        "/v1/schedules", json={"name": "r", "every": "1s", "job": JOB}, headers=member
    )
    sid = (await made.get_json())["schedule_id"]
    row = await store_of(app).fetchone("SELECT credential_id FROM schedules WHERE id = ?", (sid,))
    assert row is not None and row["credential_id"].startswith("tok_")
    revoked = await client.delete(f"/v1/auth/tokens/{row['credential_id']}", headers=ADMIN_H)
    assert revoked.status_code in (200, 204), await revoked.get_data()
    view = await until(
        client, f"/v1/schedules/{sid}", world.headers("org_admin"), lambda v: bool(v["runs"])
    )
    run = view["runs"][0]
    assert (run["outcome"], run["status"]) == ("error", 403) and "revoked" in run["detail"]
    assert view["last_error"] == run["detail"]


async def test_another_orgs_schedule_is_the_404_of_an_unknown_one(app: QuartTrio) -> None:
    client, world = await world_of(app)
    made = await client.post(
        "/v1/schedules",
        json={"name": "mine", "every": "1h", "job": JOB},
        headers=world.headers("member"),
    )
    sid = (await made.get_json())["schedule_id"]
    stranger = world.headers("wrong_org")
    for method, extra in (("GET", {}), ("PATCH", {"json": {"suspend": True}}), ("DELETE", {})):
        bodies = []
        for target in (sid, "sch_nope"):
            answer = await client.open(
                f"/v1/schedules/{target}", method=method, headers=stranger, **extra
            )
            assert answer.status_code == 404, (method, target)
            problem = await answer.get_json()
            problem.pop("request_id", None)
            bodies.append(problem)
        assert bodies[0] == bodies[1], method


async def test_a_pipeline_schedule_creates_pipeline_runs(app: QuartTrio) -> None:
    client, world = await world_of(app)
    member = world.headers("member")
    pipeline = {"stages": [{"name": "only", "stack": "shell", "command": ["true"]}]}
    made = await client.post(
        "/v1/schedules",
        json={"name": "p", "every": "1s", "pipeline": pipeline, "concurrency": "replace"},
        headers=member,
    )
    assert made.status_code == 201, await made.get_data()
    sid = (await made.get_json())["schedule_id"]
    assert "pipeline" in await made.get_json()
    view = await until(
        client,
        f"/v1/schedules/{sid}",
        member,
        lambda v: len([r for r in v["runs"] if r["outcome"] == "created"]) >= 2,
    )
    runs = [r for r in view["runs"] if r["outcome"] == "created"]
    assert all(r["pipeline_run_id"].startswith("plr_") for r in runs)
    # replace: the earlier run, still waiting for a node, was cancelled for the next
    older = await (
        await client.get(f"/v1/pipelines/{runs[-1]['pipeline_run_id']}", headers=member)
    ).get_json()
    assert older["status"] == "cancelled" and older["org_id"] == world.org_a
