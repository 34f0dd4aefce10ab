"""Preemption in the placement actor and the job's phase machine (docs/placement.md
"Preemption"): a waiting job that only lower-priority preemptible jobs keep out tells
the fewest of them to stop, holds what they free until the last is gone, then takes it;
a non-preemptible job is never told; a cancelled preemptor or a lost node gives the hold
up. A preempted attempt goes back to the queue, counted in ``preemptions`` and not in
``attempts``, with a phase event naming its preemptor."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.actors import placement as pl
from runplane.jobs.delta import Held, row_delta
from runplane.jobs.phase import (
    Assigned,
    Effect,
    InvalidTransition,
    JobState,
    Phase,
    Preempted,
    Running,
    StaleAttempt,
    transition,
)
from runplane.persistence import open_store
from runplane.placement import NodeShape
from runplane.runtime import ChildSpec, Supervisor

from .fakes import insert, shell_spec


@dataclass
class Calls:
    assigned: list[tuple[str, str]] = field(default_factory=list)
    preempted: list[tuple[str, str, int]] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass
class Placement:
    ref: Any
    calls: Calls

    async def tell(self, msg: pl.PlacementMsg) -> None:
        await self.ref.tell(msg)
        await self.ref.ask(pl.Loads())  # handled after everything sent before it
        await trio.sleep(0.01)  # the hand-overs and stop orders it started
        await self.ref.ask(pl.Loads())

    async def stats(self) -> pl.PlacementStats:
        stats: pl.PlacementStats = await self.ref.ask(pl.StatsNow())
        return stats


@pytest.fixture
async def placement(tmp_path: Path) -> AsyncIterator[Placement]:
    store = open_store("memory", tmp_path)
    await store.open()
    calls = Calls()

    async def assign(job_id: str, node_id: str) -> pl.Handover:
        calls.assigned.append((job_id, node_id))
        return pl.Handover(taken=True)

    async def preempt(job_id: str, by: str, grace_sec: int) -> bool:
        calls.preempted.append((job_id, by, grace_sec))
        return True

    def told(job_id: str, reason: str) -> bool:
        calls.reasons[job_id] = reason
        return True

    sup = Supervisor(
        [
            ChildSpec(
                "placement",
                lambda: pl.PlacementActor(
                    store=store, assign=assign, tell_reason=told, preempt=preempt
                ),
            )
        ],
        name="test",
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        try:
            yield Placement(sup.child("placement"), calls)
        finally:
            await sup.stop()
            await store.close()


def two_slots(node_id: str = "n1") -> NodeShape:
    limits = frozenset({"limit-cpu"})  # the jobs' cpu_cores is enforced
    return NodeShape(node_id, cpu_cores=8, ram_gb=32, max_concurrency=2, capabilities=limits)


def low(job_id: str, *, preemptible: bool = True) -> pl.Enqueue:
    spec = shell_spec(1, preemptible=preemptible, preempt_grace_sec=3)
    return pl.Enqueue(job_id, 10, spec, "org_x")


def high(job_id: str = "high") -> pl.Enqueue:
    return pl.Enqueue(job_id, 200, shell_spec(1), "org_x")


async def fill(placement: Placement, *, preemptible: bool = True) -> None:
    await placement.tell(pl.NodeUp(two_slots()))
    await placement.tell(low("low_a", preemptible=preemptible))
    await placement.tell(low("low_b", preemptible=preemptible))
    assert placement.calls.assigned == [("low_a", "n1"), ("low_b", "n1")]


async def test_a_high_job_preempts_the_latest_low_one_and_takes_its_place(
    placement: Placement, autojump_clock: Any
) -> None:
    await fill(placement)
    await placement.tell(high())
    calls = placement.calls
    assert calls.preempted == [("low_b", "high", 3)]  # one frees the slot: the latest
    assert calls.reasons["high"] == "preempting low_b on node n1 (grace 3 s)"
    assert calls.assigned[2:] == []  # it waits for the victim to be gone
    # another job that comes meanwhile neither gets the freed slot nor preempts low_b again
    await placement.tell(high("high_2"))
    assert calls.preempted == [("low_b", "high", 3), ("low_a", "high_2", 3)]
    await placement.tell(pl.Release("low_b"))
    assert calls.assigned[2:] == [("high", "n1")]
    assert (await placement.ref.ask(pl.Loads()))["n1"].active_jobs == 2  # low_a, high
    assert (await placement.stats()).preemptions == 2
    # the victim comes back to the queue and waits (the node is full)
    await placement.tell(low("low_b"))
    assert "low_b" in await placement.ref.ask(pl.Queued())


async def test_non_preemptible_jobs_are_left_alone_and_the_high_job_waits(
    placement: Placement, autojump_clock: Any
) -> None:
    await fill(placement, preemptible=False)
    await placement.tell(high())
    assert placement.calls.preempted == []
    reasons = await placement.ref.ask(pl.WaitReasons(("high",)))
    assert "preempting" not in reasons["high"]
    assert (await placement.stats()).preemptions == 0


async def test_a_cancelled_preemptor_gives_its_hold_up(
    placement: Placement, autojump_clock: Any
) -> None:
    await fill(placement)
    await placement.tell(high())
    await placement.tell(pl.Dequeue("high"))  # cancelled while the victim stops
    await placement.tell(pl.Release("low_b"))
    assert (await placement.ref.ask(pl.Loads()))["n1"].active_jobs == 1
    assert [j for j, _ in placement.calls.assigned] == ["low_a", "low_b"]


async def test_the_holds_node_going_down_queues_the_preemptor_again(
    placement: Placement, autojump_clock: Any
) -> None:
    await fill(placement)
    await placement.tell(high())
    await placement.tell(pl.NodeDown("n1"))
    assert "high" in await placement.ref.ask(pl.Queued())
    await placement.tell(pl.NodeUp(two_slots("n2")))
    assert placement.calls.assigned[-1] == ("high", "n2")


async def test_a_preemption_whose_victim_never_stops_is_given_up_and_tried_again(
    placement: Placement, autojump_clock: Any
) -> None:
    """An agent that never stops its job (one too old to know the preemption's cancel):
    after the victim's grace and HOLD_EXTRA_SEC the waiting job waits again, unheld, and
    asks again; nothing was freed, so nothing of the node is handed out meanwhile."""
    await fill(placement)
    await placement.tell(high())
    assert placement.calls.preempted == [("low_b", "high", 3)]
    await trio.sleep(3 + pl.HOLD_EXTRA_SEC - 1)
    assert "high" not in await placement.ref.ask(pl.Queued())  # still holding
    await trio.sleep(2)
    await placement.tell(pl.Loads())  # a message: the actor plans again
    # given up, then a new plan preempted again (the same victim: still the latest)
    assert placement.calls.preempted == [("low_b", "high", 3), ("low_b", "high", 3)]
    assert (await placement.ref.ask(pl.Loads()))["n1"].active_jobs == 2
    assert [j for j, _ in placement.calls.assigned] == ["low_a", "low_b"]
    await placement.tell(pl.Release("low_b"))  # it stops at last: the job takes its place
    assert placement.calls.assigned[-1] == ("high", "n1")


# -- the phase machine --------------------------------------------------------------------


def test_a_preempted_attempt_is_requeued_without_counting_as_a_requeue() -> None:
    state = JobState(Phase.QUEUED)
    state, _ = transition(state, Assigned("n1"), 1)
    state, _ = transition(state, Running(1), 2)
    after, effects = transition(state, Preempted(1, "job_high"), 3)
    assert (after.phase, after.attempt, after.attempts, after.preemptions) == (
        Phase.QUEUED,
        1,
        0,
        1,
    )
    assert after.node_id is None and after.error == "preempted by job_high"
    assert effects == (Effect.RELEASE, Effect.ENQUEUE)
    # the next attempt's number still grows (fencing), the requeue counter does not
    again, _ = transition(after, Assigned("n2"), 4)
    assert (again.attempt, again.attempts, again.preemptions) == (2, 0, 1)
    with pytest.raises(StaleAttempt):
        transition(again, Preempted(1, "job_high"), 5)
    with pytest.raises(InvalidTransition):
        transition(after, Preempted(1, "job_high"), 5)


async def test_the_preempted_phase_event_names_the_preemptor(tmp_path: Path) -> None:
    store = open_store("memory", tmp_path)
    await store.open()
    try:
        row = await insert(store, "job_low")
    finally:
        await store.close()
    before = JobState(Phase.RUNNING, attempt=1, node_id="n1", started_at=1)
    event = Preempted(1, "job_high")
    after, effects = transition(before, event, 5)
    delta = row_delta(Held(row, 0, {}, 0, 0), before, after, event, effects, 5)
    kinds = [e.kind for e in delta.events]
    assert kinds == ["phase", "log"]
    import json

    phase = json.loads(delta.events[0].data)
    assert (phase["phase"], phase["reason"], phase["by"]) == ("queued", "preempted", "job_high")
    assert "preempted by job_high" in json.loads(delta.events[1].data)["line"]
    assert delta.row.preemptions == 1
