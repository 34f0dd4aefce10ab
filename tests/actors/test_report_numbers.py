"""Numbered agent reports in the job actor: a number at or below the last one stored is a
resend of what the job has and is dropped (its lines and metric points stored once); the
number is stored with what the report wrote, so a restarted actor still knows it; a new
attempt starts again from 0 (docs/agent.md "Reports across a server crash").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runplane.actors.job_messages import LoseAttempt
from runplane.jobs import repo
from runplane.persistence import Store

from .harness import Agent, agent_logs, agent_metric, eventually, running_root, store, submit

__all__ = ["store"]  # the fixture

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)


async def _lines(store: Store, job_id: str) -> list[str]:
    """The job's stored stdout lines."""
    events = await repo.events_after(store, job_id, 0, kinds=("log",))
    data = [json.loads(e.data) for e in events]
    return [d["line"] for d in data if d["stream"] == "stdout"]


async def test_a_resent_report_is_stored_once_and_a_new_attempt_counts_from_zero(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        job = await submit(root)

        async def placed(attempt: int) -> bool:
            return agent.runs.get(job) == attempt

        await eventually(lambda: placed(1), "attempt 1 placed")
        await agent.start(job)
        for n, line in ((1, "a"), (2, "b"), (1, "a again"), (2, "b again")):
            assert await agent.report(job, agent_logs("node_a", job, 1, (("stdout", line),), n))
        assert await agent.report(job, agent_metric("node_a", job, 1, {"x": 1.0}, 3))
        assert await agent.report(job, agent_metric("node_a", job, 1, {"x": 2.0}, 3))
        assert await agent.report(job, agent_logs("node_a", job, 1, (("stdout", "bare"),)))
        assert await _lines(root.store, job) == ["a", "b", "bare"]
        row = await repo.get_row(root.store, job, None)
        assert row is not None and row.report_n == 3 and row.final_metrics == {"x": 1.0}

    async with running_root(store, tmp_path) as (root, agents):  # rebuilt from the row
        agent = Agent(root, agents, "node_a", cpu=4)
        agent.runs = {job: 1}
        await agent.connect()
        assert await agent.report(job, agent_logs("node_a", job, 1, (("stdout", "b"),), 2))
        assert await agent.report(job, agent_logs("node_a", job, 1, (("stdout", "c"),), 4))
        assert await _lines(root.store, job) == ["a", "b", "bare", "c"]

        await agent.report(job, LoseAttempt(1, "test: the node is gone"))
        await eventually(lambda: placed(2), "attempt 2 placed")
        row = await repo.get_row(root.store, job, None)
        assert row is not None and row.attempt == 2 and row.report_n == 0
        await agent.start(job)
        assert await agent.report(job, agent_logs("node_a", job, 2, (("stdout", "second"),), 1))
        assert (await _lines(root.store, job))[-1] == "second"
