"""The retention janitor (docs/operations.md "Retention"): finished jobs older than the
retention lose their log lines, metric points, stream points and artifacts (a deleted
artifact answers 410); their rows, phase events and final metrics stay; an org's policy
document overrides the deployment's days; 0 keeps forever."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.jobs.events import log_event, metric_event
from runplane.persistence import now_ms, to_json
from runplane.settings import Settings
from tests.auth.support import ADMIN_H

DAY_MS = 24 * 3600 * 1000


@pytest.fixture
async def app30(make_settings: Callable[..., Settings], durable_store_url: str | None) -> Any:
    """Retention of 30 days, on each durable backend."""
    env = {"database_url": durable_store_url} if durable_store_url is not None else {}
    application = create_app(make_settings(retention_days="30", **env))
    async with application.test_app():
        yield application


async def finished_job(app: QuartTrio, days_ago: int, lines: int = 5) -> str:
    """A cancelled job that ended ``days_ago`` days ago, with log lines, a metric, a
    stream point, a final metric and an artifact."""
    client = app.test_client()
    job = await (await client.post("/v1/jobs", json={"stack": "shell"})).get_json()
    job_id = job["job_id"]
    assert (await client.post(f"/v1/jobs/{job_id}/cancel")).status_code == 200
    store = app.extensions["runplane"].store
    row = await store.fetchone("SELECT event_seq FROM jobs WHERE id = ?", (job_id,))
    seq = row["event_seq"]
    events = [log_event(job_id, seq + 1 + i, "stdout", f"line {i}", now_ms()) for i in range(lines)]
    events.append(metric_event(job_id, seq + lines + 1, 3, {"loss": 0.5}, now_ms()))
    await store.execute_many(
        "INSERT INTO job_events (job_id, seq, kind, ts, data) VALUES (?,?,?,?,?)", events
    )
    await store.execute(
        "INSERT INTO stream_points (job_id, stream, seq, kind, encoding, ts, data) "
        "VALUES (?,?,?,?,?,?,?)",
        (job_id, "telemetry", 1, "telemetry", "json", now_ms(), "{}"),
    )
    ended = now_ms() - days_ago * DAY_MS
    await store.execute(
        "UPDATE jobs SET event_seq = ?, finished_at = ?, final_metrics = ? WHERE id = ?",
        (seq + lines + 1, ended, to_json({"loss": 0.5}), job_id),
    )
    put = await client.put(f"/v1/artifacts/{job_id}/out.txt", data=b"artifact")
    assert put.status_code == 201
    return str(job_id)


async def kinds(app: QuartTrio, job_id: str) -> list[str]:
    store = app.extensions["runplane"].store
    rows = await store.fetchall(
        "SELECT kind FROM job_events WHERE job_id = ? ORDER BY seq", (job_id,)
    )
    return [r["kind"] for r in rows]


async def points(app: QuartTrio, job_id: str) -> int:
    store = app.extensions["runplane"].store
    row = await store.fetchone(
        "SELECT COUNT(*) AS n FROM stream_points WHERE job_id = ?", (job_id,)
    )
    return int(row["n"])


async def test_expired_jobs_lose_their_telemetry_and_artifacts_not_their_rows(
    app30: QuartTrio,
) -> None:
    client = app30.test_client()
    old = await finished_job(app30, days_ago=40, lines=5)
    recent = await finished_job(app30, days_ago=10, lines=5)
    swept = await app30.extensions["runplane"].root.sweep_now()
    assert (swept.jobs, swept.events, swept.stream_points, swept.artifacts) == (1, 6, 1, 1)
    # the old job: phase events only; its row, final metrics and expiry stamp answer
    assert set(await kinds(app30, old)) == {"phase"}
    assert await points(app30, old) == 0
    view = await (await client.get(f"/v1/jobs/{old}")).get_json()
    assert view["phase"] == "cancelled" and view["final_metrics"] == {"loss": 0.5}
    assert view["expired_at"] is not None
    gone = await client.get(f"/v1/artifacts/{old}/out.txt")
    assert gone.status_code == 410
    problem = await gone.get_json()
    assert problem["code"] == "artifact_expired" and "retention" in problem["detail"]
    assert (await client.head(f"/v1/artifacts/{old}/out.txt")).status_code == 410
    logs = await (await client.get(f"/v1/jobs/{old}/logs")).get_json()
    assert logs["logs"] == [] and logs["metrics"] == []
    # the recent one is untouched
    assert (await kinds(app30, recent)).count("log") == 5 and await points(app30, recent) == 1
    assert (await client.get(f"/v1/artifacts/{recent}/out.txt")).status_code == 200
    assert (await (await client.get(f"/v1/jobs/{recent}")).get_json())["expired_at"] is None
    # an unknown artifact is still a 404
    assert (await client.get(f"/v1/artifacts/{recent}/nope.txt")).status_code == 404
    # a second sweep finds nothing more
    again = await app30.extensions["runplane"].root.sweep_now()
    assert again.jobs == 0


async def test_an_orgs_policy_overrides_the_days(app30: QuartTrio) -> None:
    client = app30.test_client()
    recent = await finished_job(app30, days_ago=10)
    put = await client.put("/v1/policy", json={"retention_days": 7}, headers=ADMIN_H)
    assert put.status_code == 200, await put.get_data()
    assert (await put.get_json())["policy"]["retention_days"] == 7
    swept = await app30.extensions["runplane"].root.sweep_now()
    assert swept.jobs == 1 and swept.overrides == {"org_default": 7}
    assert set(await kinds(app30, recent)) == {"phase"}
    # 0 in the document keeps that org's forever, whatever the deployment says
    await client.put("/v1/policy", json={"retention_days": 0}, headers=ADMIN_H)
    old = await finished_job(app30, days_ago=400)
    assert (await app30.extensions["runplane"].root.sweep_now()).jobs == 0
    assert (await kinds(app30, old)).count("log") == 5
    bad = await client.put("/v1/policy", json={"retention_days": -1}, headers=ADMIN_H)
    assert bad.status_code == 400


async def test_zero_days_keeps_everything(make_settings: Callable[..., Settings]) -> None:
    application = create_app(make_settings(retention_days="0"))
    async with application.test_app():
        old = await finished_job(application, days_ago=4000)
        assert (await application.extensions["runplane"].root.sweep_now()).jobs == 0
        assert (await kinds(application, old)).count("log") == 5
