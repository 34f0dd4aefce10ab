"""The job actor alone: built from fakes of what it talks to (``tests/actors/fakes.py``:
the node link, placement) on a real store, driven message by message, without the actor
tree. What its followers hear is the ``JobTransitioned`` event (``runplane/jobs/
transitions.py``): each stored transition once, after it is stored; an in-transaction part
commits with the transition or takes it down with it; a subscriber that fails is logged
and breaks nothing."""

from __future__ import annotations

import logging

import pytest

from runplane.actors.job import JobActor
from runplane.actors.job_messages import (
    AgentFinished,
    AgentPhase,
    Assign,
    Cancel,
    LoseAttempt,
    Preempt,
)
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.jobs.phase import Phase
from runplane.jobs.rows import JobRow
from runplane.jobs.transitions import JobTransitioned, TxPart
from runplane.nodes.status import AttemptOutcome
from runplane.persistence import Store, Tx
from runplane.runtime import Hub

from .fakes import Fakes, insert


class Heard:
    """A subscriber and an in-transaction part that record what they were given."""

    def __init__(self) -> None:
        self.after: list[JobTransitioned] = []
        self.in_tx: list[JobTransitioned] = []

    async def __call__(self, moved: JobTransitioned) -> None:
        self.after.append(moved)

    def part(self, moved: JobTransitioned) -> TxPart | None:
        self.in_tx.append(moved)
        return None

    def phases(self) -> list[str]:
        return [m.phase.value for m in self.after]


def built(fakes: Fakes, store: Store, row: JobRow) -> tuple[JobActor, Heard]:
    heard = Heard()
    fakes.transitions.subscribe(heard)
    fakes.transitions.in_tx(heard.part)
    return JobActor(fakes.deps(store, Hub()), row), heard


def phase_report(job_id: str, attempt: int, phase: str) -> AgentPhase:
    return AgentPhase("node_a", p.JobPhase(job_id=job_id, attempt=attempt, phase=phase))  # type: ignore[arg-type]


def finished(job_id: str, attempt: int, outcome: str = "succeeded") -> AgentFinished:
    report = p.JobFinished(job_id=job_id, attempt=attempt, outcome=outcome, exit_code=0)  # type: ignore[arg-type]
    return AgentFinished("node_a", report)


async def phase_of(store: Store, job_id: str) -> Phase:
    row = await repo.get_row(store, job_id, None)
    assert row is not None
    return row.phase


async def test_placed_running_succeeded(store: Store) -> None:
    fakes = Fakes()
    row = await insert(store, "job_unit1")
    actor, heard = built(fakes, store, row)

    assert (await actor.handle(Assign("node_a"))).taken
    [(node, order)] = fakes.node.delivered
    assert node == "node_a" and isinstance(order, p.Run) and order.attempt == 1
    assert fakes.placement.outcomes == [("node_a", AttemptOutcome.PLACED)]

    assert await actor.handle(phase_report(row.id, 1, "pulling")) is True
    assert await actor.handle(phase_report(row.id, 1, "running")) is True
    assert await actor.handle(finished(row.id, 1)) is True
    assert await phase_of(store, row.id) is Phase.SUCCEEDED

    assert heard.phases() == ["assigned", "pulling", "running", "succeeded"]
    assert [m.ends for m in heard.after] == [False, False, False, True]
    assert heard.in_tx == heard.after  # each part was asked with the same event, once
    assert fakes.placement.told == [("release", row.id)]
    assert fakes.placement.outcomes[-1] == ("node_a", AttemptOutcome.OK)

    # a report after the end changes nothing and is heard by nobody
    assert await actor.handle(finished(row.id, 1)) is False
    assert len(heard.after) == 4


async def test_a_cancel_is_heard_once(store: Store) -> None:
    fakes = Fakes()
    queued = await insert(store, "job_unit2")
    actor, heard = built(fakes, store, queued)
    outcome = await actor.handle(Cancel())
    assert outcome.cancelled and not outcome.killed_on_node
    assert fakes.placement.told == [("dequeue", queued.id)]
    assert (await actor.handle(Cancel())).cancelled is False  # already over
    assert heard.phases() == ["cancelled"] and heard.after[0].ends

    # on a node: killed there, its reservation released
    running = await insert(store, "job_unit3")
    fakes = Fakes()
    actor, heard = built(fakes, store, running)
    assert (await actor.handle(Assign("node_a"))).taken
    assert await actor.handle(phase_report(running.id, 1, "running"))
    outcome = await actor.handle(Cancel())
    assert outcome.cancelled and outcome.killed_on_node
    assert fakes.node.orders()[-1] == p.Cancel(job_id=running.id, attempt=1)
    assert fakes.placement.told == [("release", running.id)]
    assert heard.phases() == ["assigned", "running", "cancelled"]
    assert await phase_of(store, running.id) is Phase.CANCELLED


async def test_a_lost_node_requeues_and_the_next_node_runs_it(store: Store) -> None:
    fakes = Fakes()
    row = await insert(store, "job_unit4")
    actor, heard = built(fakes, store, row)
    assert (await actor.handle(Assign("node_a"))).taken
    assert await actor.handle(phase_report(row.id, 1, "running"))

    assert await actor.handle(LoseAttempt(1, "node stopped heartbeating")) is True
    assert await phase_of(store, row.id) is Phase.QUEUED
    assert fakes.placement.told == [("release", row.id), ("enqueue", row.id)]
    assert ("node_a", AttemptOutcome.LOST) in fakes.placement.outcomes
    # the lost attempt's late report is refused: fenced by its attempt
    assert await actor.handle(finished(row.id, 1)) is False

    assert (await actor.handle(Assign("node_b"))).taken
    assert [o.attempt for o in fakes.node.orders() if isinstance(o, p.Run)] == [1, 2]
    assert heard.phases() == ["assigned", "running", "queued", "assigned"]
    lost = heard.after[2]
    assert lost.before.node_id == "node_a" and lost.error == "node stopped heartbeating"
    assert not lost.ends and lost.changed


async def test_a_preempted_attempt_is_stopped_with_its_grace_and_requeued(store: Store) -> None:
    fakes = Fakes()
    row = await insert(store, "job_unit_pre")
    actor, heard = built(fakes, store, row)
    assert await actor.handle(Preempt("job_high", 3)) is False  # queued: nothing to stop
    assert (await actor.handle(Assign("node_a"))).taken
    assert await actor.handle(phase_report(row.id, 1, "running"))
    assert await actor.handle(Preempt("job_high", 3)) is True
    stop = p.Cancel(job_id=row.id, attempt=1, grace_sec=3, preempted_by="job_high")
    assert fakes.node.orders()[-1] == stop
    assert await actor.handle(Preempt("job_other", 3)) is False  # one at a time
    # the process ended on its SIGTERM: back in the queue, not a failure nor a requeue
    assert await actor.handle(finished(row.id, 1, "cancelled")) is True
    after = await repo.get_row(store, row.id, None)
    assert after is not None
    assert (after.phase, after.attempts, after.preemptions) == (Phase.QUEUED, 0, 1)
    assert fakes.placement.told == [("release", row.id), ("enqueue", row.id)]
    assert heard.phases() == ["assigned", "running", "queued"]
    # the next attempt runs it; one that succeeds before a preemption lands stays succeeded
    assert (await actor.handle(Assign("node_a"))).taken
    assert await actor.handle(phase_report(row.id, 2, "running"))
    assert await actor.handle(Preempt("job_high", 3)) is True
    assert await actor.handle(finished(row.id, 2)) is True
    assert await phase_of(store, row.id) is Phase.SUCCEEDED


async def test_an_in_tx_part_that_raises_rolls_the_transition_back(store: Store) -> None:
    fakes = Fakes()
    row = await insert(store, "job_unit5")
    actor, heard = built(fakes, store, row)

    def failing(moved: JobTransitioned) -> TxPart:
        def part(tx: Tx) -> None:
            tx.execute("UPDATE jobs SET priority = 7 WHERE id = ?", (moved.job_id,))
            raise RuntimeError("the part failed")

        return part

    fakes.transitions.in_tx(failing)
    events = await repo.events_after(store, row.id, 0, limit=100)
    with pytest.raises(RuntimeError, match="the part failed"):
        await actor.handle(Assign("node_a"))
    after = await repo.get_row(store, row.id, None)
    assert after is not None
    assert (after.phase, after.attempt, after.priority) == (Phase.QUEUED, 0, 0)  # all of it
    assert await repo.events_after(store, row.id, 0, limit=100) == events  # none stored
    assert after.event_seq == row.event_seq
    assert heard.after == [] and fakes.node.delivered == []  # nobody heard, nothing sent


async def test_a_failing_subscriber_breaks_nothing(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    fakes = Fakes()

    async def broken(moved: JobTransitioned) -> None:
        raise ValueError("subscriber bug")

    fakes.transitions.subscribe(broken)
    row = await insert(store, "job_unit6")
    actor, heard = built(fakes, store, row)  # subscribed after the broken one
    with caplog.at_level(logging.ERROR, logger="runplane.jobs"):
        assert (await actor.handle(Assign("node_a"))).taken
    assert heard.phases() == ["assigned"]  # the next subscriber still heard it
    assert fakes.node.delivered  # and the effects ran
    [record] = [r for r in caplog.records if r.message == "job transition subscriber failed"]
    assert record.__dict__["job_id"] == row.id and record.__dict__["to"] == "assigned"
    assert record.__dict__["error"] == "subscriber bug"
