"""Job analytics on every backend: counts from a seeded history are exact (failed +
timeout as failed; submitted by creation, ends by finish), per org and for all, and the
rollup a job's own insert and end keep matches a backfill from the jobs."""

from __future__ import annotations

import random
from typing import Any

import pytest

from runplane.jobs import analytics, counts
from runplane.persistence import Store
from runplane.problems import Problem

NOW = 1_900_000_000_000  # unix ms, "now" for every query here
HOUR = 3_600_000


async def seed(store: Store, n: int = 400) -> list[dict[str, Any]]:
    rng = random.Random(7)
    jobs = []
    for i in range(n):
        created = NOW - rng.randrange(30 * HOUR)
        phase = rng.choice(["succeeded", "failed", "timeout", "cancelled", "queued", "running"])
        finished = created + rng.randrange(2 * HOUR) if phase not in ("queued", "running") else None
        if finished is not None and finished > NOW:
            finished = None
            phase = "running"
        jobs.append(
            {
                "id": f"job_{i:05d}",
                "org": f"org_{i % 3}",
                "phase": phase,
                "created": created,
                "finished": finished,
            }
        )
    await store.execute_many(
        "INSERT INTO jobs (id, org_id, project, submitted_by, stack, image, phase, priority,"
        " mode, seed, spec_hash, spec, event_seq, created_at, updated_at, finished_at)"
        " VALUES (?, ?, '', 'u', 'shell', 'img', ?, 100, 'run', 1, 'h', '{}', 0, ?, ?, ?)",
        [(j["id"], j["org"], j["phase"], j["created"], j["created"], j["finished"]) for j in jobs],
    )
    return jobs


def expected(jobs: list[dict[str, Any]], org: str | None, window_ms: int, buckets: int) -> Any:
    width = max(1, -(-window_ms // (buckets * 60_000)))  # minutes, rounded up
    end = NOW // 60_000 + 1
    start = end - width * buckets
    rows = [[0, 0, 0, 0] for _ in range(buckets)]
    live = {"running": 0, "queued": 0}
    for j in jobs:
        if org is not None and j["org"] != org:
            continue
        b = (j["created"] // 60_000 - start) // width
        if 0 <= b < buckets:
            rows[b][0] += 1
        if j["finished"] is not None:
            b = (j["finished"] // 60_000 - start) // width
            column = {"succeeded": 1, "failed": 2, "timeout": 2, "cancelled": 3}[j["phase"]]
            if 0 <= b < buckets:
                rows[b][column] += 1
        elif j["phase"] == "queued":
            live["queued"] += 1
        else:
            live["running"] += 1
    return [
        {
            "ts": (start + b * width) * 60_000,
            "submitted": r[0],
            "succeeded": r[1],
            "failed": r[2],
            "cancelled": r[3],
        }
        for b, r in enumerate(rows)
    ], live


@pytest.mark.parametrize(("window", "buckets"), [("24h", 48), ("30d", 500), ("90m", 7)])
async def test_counts_from_a_seeded_history_are_exact(
    store: Store, window: str, buckets: int
) -> None:
    jobs = await seed(store)
    assert await counts.backfill(store) is True
    assert await counts.backfill(store) is False  # only into an empty rollup
    window_ms = analytics.parse_window(window)
    for org in (None, "org_1"):
        got = await analytics.job_analytics(store, org, window_ms, buckets, NOW)
        want, live = expected(jobs, org, window_ms, buckets)
        assert got["buckets"] == want
        summary = got["summary"]
        for key in ("submitted", "succeeded", "failed", "cancelled"):
            assert summary[key] == sum(b[key] for b in want), key
        assert (summary["running"], summary["queued"]) == (live["running"], live["queued"])
        if window_ms >= 86_400_000:
            assert summary["failed"] > 0 and summary["cancelled"] > 0
    if window == "30d":
        assert got["window"] == "725h"  # 500 buckets of 87 minutes cover the 30 days


async def test_the_rollup_written_with_each_job_matches_a_backfill(store: Store) -> None:
    from runplane.jobs import repo
    from runplane.jobs.jobspec import JobSpec
    from runplane.jobs.phase import JobState, Phase

    def new(i: int, org: str) -> repo.NewJob:
        spec = JobSpec(stack="shell", image="i", mode="run", seed=1)
        return repo.NewJob(
            id=f"job_live{i}",
            org_id=org,
            project="",
            submitted_by="u",
            spec=spec,
            spec_hash="h",
            priority=100,
        )

    for i in range(6):
        await store.transaction(repo.insert_job(store, new(i, f"org_{i % 2}")))
    for i, phase in enumerate([Phase.SUCCEEDED, Phase.FAILED, Phase.TIMEOUT, Phase.CANCELLED]):
        state = JobState(phase=phase, finished_at=NOW - 1000 * i, started_at=NOW - 5000)
        await store.transaction(
            repo.save_state(f"job_live{i}", state, [], 1, ended_org=f"org_{i % 2}")
        )
    kept = await store.fetchall(
        "SELECT org_id, minute, submitted, succeeded, failed, cancelled FROM job_counts"
        " ORDER BY org_id, minute"
    )
    await store.execute("DELETE FROM job_counts")
    assert await counts.backfill(store) is True
    rebuilt = await store.fetchall(
        "SELECT org_id, minute, submitted, succeeded, failed, cancelled FROM job_counts"
        " ORDER BY org_id, minute"
    )
    assert [dict(r) for r in kept] == [dict(r) for r in rebuilt]
    total = {k: sum(int(r[k]) for r in kept if r["org_id"] == "*") for k in counts.COUNTERS}
    assert total == {"submitted": 6, "succeeded": 1, "failed": 2, "cancelled": 1}


@pytest.mark.parametrize("bad", ["31d", "0h", "abc", "24", "1w", "-5m"])
def test_bad_windows_are_400_naming_window(bad: str) -> None:
    with pytest.raises(Problem) as raised:
        analytics.parse_window(bad)
    assert raised.value.status == 400 and raised.value.errors[0].key == "window"
