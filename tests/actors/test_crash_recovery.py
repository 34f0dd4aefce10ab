"""Crash injection: each actor kind, crashed mid-load by a message that makes ``handle``
raise, is restarted by its supervisor and rebuilds its state from the store, so nothing is
lost or counted twice and work goes on.

The actor tree runs in process (``Root``) on a real store (SQLite and PostgreSQL), with a
node agent played by the test (``tests/actors/harness.py``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runplane.actors import admission as adm
from runplane.actors import placement as pl
from runplane.actors.job_messages import AgentFinished
from runplane.actors.node import NODES, Beat, Deliver
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.persistence import Store
from runplane.policy.refusal import AdmissionRefused
from runplane.runtime import ActorCrashed

from .harness import (
    Agent,
    agent_logs,
    all_in,
    count_in,
    equals,
    eventually,
    greater,
    live_is,
    phase,
    queue_of,
    restarts,
    running_root,
    store,
    submit,
    used_cpu,
)

__all__ = ["store"]  # the fixture

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

# placement --------------------------------------------------------------------------------


async def test_placement_crash_keeps_queue_reservations_and_reasons(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        running = [await submit(root) for _ in range(2)]  # fill node_a (2 + 2 of 4 cores)
        await eventually(lambda: all_in(agent.runs, running), "both placed")
        for job_id in running:
            await agent.start(job_id)
        waiting = [await submit(root) for _ in range(3)]
        await eventually(lambda: equals(queue_of(root), set(waiting)), "three queued")
        reasons = await root.placement.ask(pl.WaitReasons(tuple(waiting)))
        assert set(reasons) == set(waiting) and all(reasons.values())

        # crash it mid-load: the poison is followed by more work already in its mailbox
        before = root.supervisor.statistics().restarts
        poison = pl.Enqueue("job_poison", 0, None)  # type: ignore[arg-type]  # no spec
        await root.placement.tell(poison)  # handle raises
        late = await submit(root)  # its Enqueue waits behind the poison
        await eventually(lambda: greater(restarts(root), before), "placement restarted")

        # nothing lost, nothing counted twice
        assert await queue_of(root) == {*waiting, late}
        assert await used_cpu(root, "node_a") == 4.0  # two running jobs, not 0 and not 8
        reasons = await root.placement.ask(pl.WaitReasons((*waiting, late)))
        assert set(reasons) == {*waiting, late}
        assert all("node" in r or "cpu" in r.lower() for r in reasons.values()), reasons

        # work goes on: a finished job frees room for exactly one more
        await agent.finish(running[0])
        await eventually(lambda: count_in(agent.runs, [*waiting, late], 1), "one more placed")
        assert await used_cpu(root, "node_a") == 4.0
        assert len(await queue_of(root)) == 3


async def test_assignment_won_by_a_dead_placement_is_counted_not_doubled(
    store: Store, tmp_path: Path
) -> None:
    """An assignment handed over by the crashed incarnation can reach the job after the
    new one rebuilt its queue: the job refuses the second assignment and names its node,
    and placement moves the reservation there instead of placing it twice."""
    async with running_root(store, tmp_path) as (root, agents):
        a, b = Agent(root, agents, "node_a", cpu=4), Agent(root, agents, "node_b", cpu=4)
        await a.connect()
        job_id = await submit(root)
        await eventually(lambda: all_in(a.runs, [job_id]), "placed on node_a")
        await b.connect()
        # the job is on node_a; a placement that still thinks it queued assigns it to node_b
        answer = await root._assign(job_id, "node_b")
        assert answer == pl.Handover(taken=False, on_node="node_a")
        row = await repo.get_row(root.store, job_id, None)
        assert row is not None
        await root.placement.tell(pl.Enqueue.of(row))
        await eventually(lambda: equals(used_cpu(root, "node_a"), 2.0), "held on node_a")
        assert await used_cpu(root, "node_b") == 0.0
        assert job_id not in await queue_of(root)
        assert await phase(root, job_id) == "assigned"


# job --------------------------------------------------------------------------------------


async def test_job_actor_crash_loses_no_event_and_repeats_none(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        job_id = await submit(root)
        await eventually(lambda: all_in(agent.runs, [job_id]), "placed")
        await agent.start(job_id)
        attempt = agent.runs[job_id]
        await agent.report(
            job_id, agent_logs("node_a", job_id, attempt, (("stdout", "one"), ("stdout", "two")))
        )

        # crash it: an outcome that is no phase makes handle raise
        report = p.JobFinished.model_construct(job_id=job_id, attempt=attempt, outcome="exploded")
        poison = AgentFinished("node_a", report)
        with pytest.raises(ActorCrashed):
            await agent.report(job_id, poison)

        # restarted from its row: same attempt, reports still accepted, seq continues
        await agent.report(job_id, agent_logs("node_a", job_id, attempt, (("stdout", "three"),)))
        await agent.finish(job_id)
        assert await phase(root, job_id) == "succeeded"

        events = await repo.events_after(root.store, job_id, 0, limit=1000)
        seqs = [e.seq for e in events]
        assert seqs == list(range(1, len(seqs) + 1))  # no gap, no repeat
        lines = [e.data for e in events if e.kind == "log" and '"stream":"stdout"' in e.data]
        assert [x for x in ("one", "two", "three") if any(f'"{x}"' in line for line in lines)] == [
            "one",
            "two",
            "three",
        ]
        assert len(lines) == 3
        notes = [e.data for e in events if e.kind == "log" and '"stream":"system"' in e.data]
        assert len(notes) == 1 and "attempt 1 on node_a (requeues so far: 0)" in notes[0]
        phases = [e.data for e in events if e.kind == "phase"]
        assert sum('"succeeded"' in x for x in phases) == 1
        # the SSE follower sees the same, once, and ends
        seen = [e.seq async for batch in root.jobs.follow(job_id, 0) for e in batch]
        assert seen == seqs
        # slot and reservation released exactly once
        ledger = await root.admission.ask(adm.Ledger())
        assert ledger.live == 0
        assert await used_cpu(root, "node_a") == 0.0


# node -------------------------------------------------------------------------------------


async def test_node_actor_crash_keeps_session_capacity_and_attempts(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        first = await submit(root)
        await eventually(lambda: all_in(agent.runs, [first]), "placed")
        await agent.start(first)
        assert await used_cpu(root, "node_a") == 2.0

        with pytest.raises(ActorCrashed):
            await root.registry.ask(NODES, "node_a", Deliver(None))  # type: ignore[arg-type]

        # restarted: it resumed the session and re-announced the node, without doubling
        await eventually(lambda: equals(used_cpu(root, "node_a"), 2.0), "node announced again")
        await root.registry.tell(NODES, "node_a", Beat((("first", 1),)))
        # new work reaches the agent through the resumed session
        second = await submit(root)
        await eventually(lambda: all_in(agent.runs, [second]), "second placed on the session")
        assert await used_cpu(root, "node_a") == 4.0
        # the node still knows the first attempt: a finish is recorded and frees its room
        await agent.finish(first)
        await eventually(lambda: equals(used_cpu(root, "node_a"), 2.0), "first released")
        assert await phase(root, first) == "succeeded"
        views = {v["id"]: v for v in await root.fleet.views()}
        assert views["node_a"]["status"] == "online"
        assert views["node_a"]["active_jobs"] == 1


# admission --------------------------------------------------------------------------------


async def test_admission_crash_recounts_the_ledger_and_keeps_the_quota(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path, max_concurrent_org="5") as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        jobs = [await submit(root) for _ in range(4)]
        await eventually(lambda: count_in(agent.runs, jobs, 2), "two placed")
        before = await root.admission.ask(adm.Ledger())

        # crash it mid-load: a phase that does not exist makes handle raise; a submit is
        # already waiting behind it
        restarts_before = root.supervisor.statistics().restarts
        await root.admission.tell(adm.PhaseChanged(jobs[0], "exploded", "org_default", "usr_alice"))
        fifth = await submit(root)
        await eventually(lambda: greater(restarts(root), restarts_before), "admission restarted")

        after = await root.admission.ask(adm.Ledger())
        assert after.live == before.live + 1 == 5
        assert after.per_org == {"org_default": 5}
        assert after.per_user == {("org_default", "usr_alice"): 5}
        assert after.on_node_per_org == {"org_default": 2}
        with pytest.raises(AdmissionRefused):  # the quota holds: 5 live of 5
            await submit(root)

        # work goes on: a job that ends frees exactly one slot
        placed = [j for j in jobs if j in agent.runs]
        await agent.start(placed[0])
        await agent.finish(placed[0])
        await eventually(lambda: live_is(root, 4), "slot freed")
        sixth = await submit(root)
        assert await phase(root, sixth) == "queued"
        with pytest.raises(AdmissionRefused):
            await submit(root)
        assert fifth != sixth


async def test_admission_counts_live_work_it_missed_at_its_next_transition(
    store: Store, tmp_path: Path
) -> None:
    """A job admitted by an incarnation that crashed before the new one recounted is
    counted at its next phase change (it carries its org and submitter)."""
    async with running_root(store, tmp_path) as (root, _):
        await root.admission.tell(adm.PhaseChanged("job_unknown", "assigned", "org_x", "usr_y"))
        ledger = await root.admission.ask(adm.Ledger())
        assert ledger.per_org == {"org_x": 1} and ledger.on_node_per_org == {"org_x": 1}
        await root.admission.tell(adm.PhaseChanged("job_unknown", "succeeded", "org_x", "usr_y"))
        assert (await root.admission.ask(adm.Ledger())).live == 0
