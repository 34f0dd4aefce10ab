"""Retry policies in the actor tree: a try that ends in a phase the policy lists goes back
to ``queued`` keeping its id, waits out its backoff outside placement's queue (still live
for admission), then runs again; cancel during the backoff ends it; a restart during the
backoff neither loses the retry nor places the job early.

The tree runs in process on a real store with a node agent played by the test
(``tests/actors/harness.py``). The store runs in threads, so the backoffs run in real
time (a second or two each); the due times are checked on the stored rows, never by
timing the test.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.actors.job_messages import JOBS, Cancel
from runplane.jobs import repo
from runplane.jobs.spec import SubmitJobBody
from runplane.jobs.view import job_view
from runplane.persistence import Store, now_ms
from runplane.system import Root

from .harness import (
    WHO,
    Agent,
    agent_finished,
    equals,
    eventually,
    live_is,
    phase,
    queue_of,
    running_root,
    store,
)

__all__ = ["store"]  # the fixture

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)


async def submit(root: Root, retry: dict[str, Any] | None) -> str:
    body = SubmitJobBody.model_validate(
        {"stack": "shell", "command": ["false"], "limits": {"cpu_cores": 1}, "retry": retry}
    )
    return (await root.jobs.submit(body, WHO)).row.id


async def fail(agent: Agent, job_id: str, outcome: str = "failed") -> None:
    attempt = agent.runs[job_id]
    done = agent_finished(agent.node_id, job_id, attempt, outcome, "exit code 1", {"loss": 1.0}, 1)
    assert await agent.report(job_id, done) is True


async def attempt_is(agent: Agent, job_id: str, attempt: int) -> bool:
    await trio.lowlevel.checkpoint()
    return agent.runs.get(job_id) == attempt


async def view(root: Root, job_id: str) -> dict[str, Any]:
    row = await repo.get_row(root.store, job_id, None)
    assert row is not None
    return job_view(row)


async def system_lines(root: Root, job_id: str) -> list[str]:
    events = await repo.events_after(root.store, job_id, 0, kinds=("log",))
    return [json.loads(e.data)["line"] for e in events if json.loads(e.data)["stream"] == "system"]


async def test_a_failed_try_runs_again_after_its_backoff_and_succeeds(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        job = await submit(root, {"limit": 2, "backoff_sec": 1, "backoff_factor": 2})
        await eventually(lambda: attempt_is(agent, job, 1), "first try placed")
        await agent.start(job)
        began = trio.current_time()
        await fail(agent, job)

        waiting = await view(root, job)
        assert waiting["phase"] == "queued" and waiting["retries"] == 1
        assert waiting["retry_at"] is not None
        assert waiting["wait_reason"].startswith("retry 1: waiting out its backoff until")
        assert waiting["final_metrics"] == {}  # the next try's own, once it reports
        [tried] = waiting["tries"]
        assert tried["try"] == 1 and tried["phase"] == "failed" and tried["attempt"] == 1
        assert tried["exit_code"] == 1 and tried["final_metrics"] == {"loss": 1.0}
        # outside placement's queue while it waits, but live for admission
        assert job not in await queue_of(root)
        assert await live_is(root, 1)

        await eventually(lambda: attempt_is(agent, job, 2), "second try placed")
        assert trio.current_time() - began >= 1  # not before its backoff
        await agent.start(job)
        await agent.finish(job)
        done = await view(root, job)
        assert done["phase"] == "succeeded" and done["retries"] == 1 and done["error"] == ""
        assert done["attempt"] == 2 and done["attempts"] == 0  # retries are not requeues
        assert done["job_id"] == job and len(done["tries"]) == 1
        lines = await system_lines(root, job)
        assert lines == [
            "attempt 1 on node_a (requeues so far: 0)",
            "try 1 failed: exit code 1; retry 1 (try 2) after a 1 s backoff",
            "retry 1: try 2 goes back in the queue",
            "attempt 2 (try 2) on node_a (requeues so far: 0)",
        ]
        events = await repo.events_after(root.store, job, 0, kinds=("phase",))
        retried = [json.loads(e.data) for e in events if "retry" in json.loads(e.data)]
        assert [(d["phase"], d["retry"]) for d in retried] == [("queued", 1)]
        # each assignment says its node and attempt (the run view's timeline shows them)
        placed = [json.loads(e.data) for e in events if json.loads(e.data)["phase"] == "assigned"]
        assert [(d["node_id"], d["attempt"]) for d in placed] == [("node_a", 1), ("node_a", 2)]


async def test_the_backoff_grows_by_its_factor_and_the_limit_ends_it(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        job = await submit(
            root, {"limit": 2, "on": ["failed", "timeout"], "backoff_sec": 1, "backoff_factor": 3}
        )
        backoffs = []
        for attempt in (1, 2, 3):
            await eventually(lambda a=attempt: attempt_is(agent, job, a), f"try {attempt}")  # type: ignore[misc]
            await agent.start(job)
            await fail(agent, job, "timeout" if attempt == 2 else "failed")
            row = await repo.get_row(root.store, job, None)
            assert row is not None
            if row.retry_at is not None:  # the due time against the try's end, both stored
                backoffs.append((row.retry_at - row.tries[-1]["finished_at"]) / 1000)
        assert [round(b) for b in backoffs] == [1, 3]  # 1 s, then 1 s * 3
        done = await view(root, job)
        assert done["phase"] == "failed" and done["retries"] == 2
        assert [t["phase"] for t in done["tries"]] == ["failed", "timeout"]
        assert await live_is(root, 0)


async def test_limit_zero_and_an_unlisted_outcome_end_at_once(store: Store, tmp_path: Path) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        none = await submit(root, {"limit": 0})
        timeout_only = await submit(root, {"limit": 3, "on": ["timeout"]})
        for job in (none, timeout_only):
            await eventually(lambda j=job: attempt_is(agent, j, 1), "placed")  # type: ignore[misc]
            await agent.start(job)
            await fail(agent, job)
            done = await view(root, job)
            assert (done["phase"], done["retries"], done["tries"]) == ("failed", 0, [])


async def test_cancel_during_the_backoff_stops_the_retries(store: Store, tmp_path: Path) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        job = await submit(root, {"limit": 3, "backoff_sec": 2})
        await eventually(lambda: attempt_is(agent, job, 1), "placed")
        await agent.start(job)
        await fail(agent, job)
        outcome = await root.registry.ask(JOBS, job, Cancel())
        assert outcome.cancelled and not outcome.killed_on_node  # nothing on a node
        await trio.sleep(3)  # past the backoff
        done = await view(root, job)
        assert (done["phase"], done["retries"], done["retry_at"]) == ("cancelled", 1, None)
        assert agent.runs[job] == 1 and job not in await queue_of(root)
        assert await live_is(root, 0)


async def test_a_restart_during_the_backoff_keeps_the_retry_and_its_due_time(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        job = await submit(root, {"limit": 1, "backoff_sec": 2})
        await eventually(lambda: attempt_is(agent, job, 1), "placed")
        await agent.start(job)
        await fail(agent, job)
        row = await repo.get_row(root.store, job, None)
        assert row is not None and row.retry_at is not None
        due = row.retry_at
    # the server restarts while the job waits: placement's rebuild leaves it out, its
    # actor (re-activated by recovery) wakes it when the stored due time comes
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        await eventually(lambda: attempt_is(agent, job, 2), "second try after the restart")
        assert now_ms() >= due  # placed no earlier than its stored due time
        await agent.start(job)
        await agent.finish(job)
        await eventually(lambda: equals(phase(root, job), "succeeded"), "succeeded")
        assert (await view(root, job))["retries"] == 1
