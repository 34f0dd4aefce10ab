"""A server restart under running jobs: a node rebuilt without its session gets its grace
plus the reconnect grace (``Root.reconnect_grace_sec``, 30 s) to say hello, because its
agent may be waiting out its reconnect backoff; its jobs go on when it does, and are
requeued only when it does not (docs/jobs.md "Restart").

The tree runs in process on a real store with a node agent played by the test
(``tests/actors/harness.py``). Heartbeats are 0.2 s, so the plain grace is 0.6 s; the
checks wait for outcomes, never time the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from runplane.jobs import repo
from runplane.persistence import Store

from .harness import Agent, eventually, phase, running_root, store, submit

__all__ = ["store"]  # the fixture

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

BEAT = {"heartbeat_sec": 0.2}  # grace: 3 beats, 0.6 s


async def _running_job(store: Store, tmp_path: Path) -> tuple[str, dict[str, int]]:
    """A job running on node_a when the server stops; the attempts its agent still runs."""
    async with running_root(store, tmp_path, timing=BEAT) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        job = await submit(root)
        await eventually(lambda: _has(agent.runs, job), "the job placed")
        await agent.start(job)
        return job, dict(agent.runs)


async def _has(runs: dict[str, int], job_id: str) -> bool:
    await trio.lowlevel.checkpoint()
    return job_id in runs


async def _is(store: Store, job_id: str, want: str) -> bool:
    row = await repo.get_row(store, job_id, None)
    return row is not None and row.phase.value == want


async def test_a_node_backing_off_past_its_grace_after_a_restart_keeps_its_jobs(
    store: Store, tmp_path: Path
) -> None:
    job, runs = await _running_job(store, tmp_path)
    async with running_root(store, tmp_path, timing=BEAT) as (root, agents):
        # the agent is still backing off: well past the plain grace (0.6 s), inside the
        # reconnect grace (30 s)
        await trio.sleep(2.0)
        assert await phase(root, job) == "running"
        agent = Agent(root, agents, "node_a", cpu=4)
        agent.runs = runs  # its hello lists the attempt it still runs
        await agent.connect()
        await agent.finish(job)
        row = await repo.get_row(root.store, job, None)
        assert row is not None
        assert (row.phase.value, row.attempt, row.attempts) == ("succeeded", 1, 0)
        assert agent.cancels == []


async def test_a_node_that_never_comes_back_after_a_restart_has_its_jobs_requeued(
    store: Store, tmp_path: Path
) -> None:
    job, _ = await _running_job(store, tmp_path)
    timing = {**BEAT, "reconnect_grace_sec": 0.5}
    async with running_root(store, tmp_path, timing=timing) as (root, _agents):
        await eventually(lambda: _is(root.store, job, "queued"), "the job requeued")
        row = await repo.get_row(root.store, job, None)
        assert row is not None and row.attempts == 1
        assert "node_a" in row.error and "lost" in row.error
