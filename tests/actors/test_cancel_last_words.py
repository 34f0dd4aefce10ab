"""After a cancel the job actor keeps recording the cancelled attempt's last output and its
finish (exit code, signal), quietly; reports of any other attempt are still refused."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from runplane.jobs import repo
from runplane.persistence import Store

from .harness import Agent, agent_finished, agent_logs, eventually, running_root, store, submit

__all__ = ["store"]  # the fixture, parametrized over SQLite and PostgreSQL

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)


async def test_last_words_and_exit_code_after_a_cancel(
    store: Store, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        job_id = await submit(root)

        async def placed() -> bool:
            return job_id in agent.runs

        await eventually(placed, "placed")
        await agent.start(job_id)
        attempt = agent.runs[job_id]
        with caplog.at_level(logging.DEBUG, logger="runplane.jobs"):
            outcome = await root.jobs.cancel(job_id, None)
            assert outcome[1].cancelled
            # the handler's output arrives after the cancel: recorded
            late = agent_logs("node_a", job_id, attempt, (("stdout", "last words"),))
            assert await agent.report(job_id, late) is True
            # another attempt's report is not
            stale = agent_logs("node_a", job_id, attempt + 1, (("stdout", "not mine"),))
            assert await agent.report(job_id, stale) is False
            done = agent_finished(
                "node_a", job_id, attempt, "cancelled", "cancelled", {}, 143, None
            )
            assert await agent.report(job_id, done) is True
            assert await agent.report(job_id, done) is True  # a resend writes nothing more
        row = await repo.get_row(root.store, job_id, None)
        assert row is not None and row.phase.value == "cancelled"
        assert (row.exit_code, row.signal) == (143, None)
        events = await repo.events_after(root.store, job_id, 0, limit=100)
        lines = [e.data for e in events if e.kind == "log"]
        assert sum('"last words"' in line for line in lines) == 1
        assert not any('"not mine"' in line for line in lines)
        assert sum("the cancelled process ended with exit code 143" in x for x in lines) == 1
        assert [e.seq for e in events] == list(range(1, len(events) + 1))
        quiet = [r for r in caplog.records if r.name == "runplane.jobs"]
        assert not [r for r in quiet if r.levelno >= logging.WARNING and "stale" not in r.msg]
