"""A queued job's wait reason on its event stream, and its attempts in its own words.

Placement computes the reasons; when a job's reason changes it tells the job's actor
(never waiting, at most once per ``REASON_EVERY`` seconds per job), which stores a
``phase`` event repeating ``queued`` with the ``reason`` (none when the reason is the one
it has) and publishes it. The job actor also writes a system line per attempt that starts
or is lost, using the Job view's words (``attempt`` the run number, ``attempts`` the
requeues so far).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.actors import placement as pl
from runplane.actors.job import JobActor
from runplane.actors.job_messages import WaitReason
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.jobs.events import JobEvent, StoredEvent, ring_name
from runplane.jobs.phase import Phase
from runplane.jobs.rows import JobRow
from runplane.jobs.spec import SubmitJobBody
from runplane.jobs.view import job_view
from runplane.persistence import Store, open_store
from runplane.placement import NodeShape
from runplane.runtime import ChildSpec, Hub, Supervisor
from runplane.services.jobs import Submitter
from runplane.settings import load_settings
from runplane.system import Root

from .fakes import CATALOG, Fakes, insert, shell_spec


async def stored(store: Store, job_id: str) -> list[StoredEvent]:
    return await repo.events_after(store, job_id, 0, limit=1000)


def payload(event: StoredEvent | JobEvent) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(event.data)
    return data


async def fresh_row(store: Store, job_id: str) -> JobRow:
    row = await repo.get_row(store, job_id, None)
    assert row is not None
    return row


# -- the job actor ---------------------------------------------------------------------


async def test_a_changed_wait_reason_is_one_stored_event_and_a_repeat_none(
    store: Store,
) -> None:
    row = await insert(store, "job_wait1")
    hub = Hub()
    actor = JobActor(Fakes().deps(store, hub), row)
    ring = hub.find_ring(ring_name(row.id))
    assert ring is not None
    with ring.subscribe(from_seq=row.event_seq) as cursor:
        assert await actor.handle(WaitReason(pl.NO_NODES)) is True
        events = await stored(store, row.id)
        assert [e.seq for e in events] == [1, 2]
        assert events[-1].kind == "phase"
        assert payload(events[-1]) == {
            "kind": "phase",
            "job_id": row.id,
            "seq": 2,
            "phase": "queued",
            "reason": pl.NO_NODES,
        }
        assert not events[-1].ends_stream
        assert (await fresh_row(store, row.id)).wait_reason == pl.NO_NODES

        # the same reason again: nothing stored, nothing published
        assert await actor.handle(WaitReason(pl.NO_NODES)) is False
        assert len(await stored(store, row.id)) == 2

        # another reason: exactly one more event
        assert await actor.handle(WaitReason("no node meets: 2 CPU cores")) is True
        events = await stored(store, row.id)
        assert [e.seq for e in events] == [1, 2, 3]
        assert payload(events[-1])["reason"] == "no node meets: 2 CPU cores"

        published = await cursor.receive_many(10)
        assert [seq for seq, _ in published] == [2, 3]
        assert [payload(e)["reason"] for _, e in published] == [
            pl.NO_NODES,
            "no node meets: 2 CPU cores",
        ]

    # an actor rebuilt from the row (a restart) knows the reason it stored
    again = JobActor(Fakes().deps(store, Hub()), await fresh_row(store, row.id))
    assert await again.handle(WaitReason("no node meets: 2 CPU cores")) is False
    assert len(await stored(store, row.id)) == 3


async def test_a_job_off_the_queue_ignores_wait_reasons_until_requeued(store: Store) -> None:
    """And the attempt lines say what the view says: ``attempt`` (the run number) and
    ``attempts`` (the requeues so far)."""
    from runplane.actors.job_messages import Assign, LoseAttempt

    row = await insert(store, "job_wait2")
    fakes = Fakes()
    actor = JobActor(fakes.deps(store, Hub()), row)
    assert await actor.handle(WaitReason(pl.NO_NODES)) is True
    view = job_view(await fresh_row(store, row.id))
    assert (view["attempt"], view["attempts"]) == (0, 0)

    assert (await actor.handle(Assign("node_a"))).taken
    assert await actor.handle(WaitReason("late reason")) is False  # assigned: not stored
    view = job_view(await fresh_row(store, row.id))
    assert (view["attempt"], view["attempts"]) == (1, 0)
    assert "wait_reason" not in view

    assert await actor.handle(LoseAttempt(1, "node stopped heartbeating")) is True
    view = job_view(await fresh_row(store, row.id))
    assert view["phase"] == "queued" and (view["attempt"], view["attempts"]) == (1, 1)
    assert "wait_reason" not in view  # the old reason went with the requeue
    # requeued: the same reason as before the assignment is news again
    assert await actor.handle(WaitReason(pl.NO_NODES)) is True

    assert (await actor.handle(Assign("node_b"))).taken
    view = job_view(await fresh_row(store, row.id))
    assert (view["attempt"], view["attempts"]) == (2, 1)

    lines = [
        payload(e)["line"]
        for e in await stored(store, row.id)
        if e.kind == "log" and payload(e)["stream"] == "system"
    ]
    assert lines == [
        "attempt 1 on node_a (requeues so far: 0)",
        "attempt 1 requeued (requeues so far: 1): node stopped heartbeating",
        "attempt 2 on node_b (requeues so far: 1)",
    ]
    assert [m.attempt for m in fakes.node.orders() if isinstance(m, p.Run)] == [1, 2]
    reasons = [payload(e).get("reason") for e in await stored(store, row.id) if e.kind == "phase"]
    assert reasons == [None, pl.NO_NODES, None, None, pl.NO_NODES, None]


# -- placement -----------------------------------------------------------------------------


@dataclass
class Told:
    """placement's ``tell_reason``: records each telling; ``refuse`` makes it fail."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    refuse: bool = False

    def __call__(self, job_id: str, reason: str) -> bool:
        if self.refuse:
            return False
        self.calls.append((job_id, reason))
        return True

    def take(self) -> list[tuple[str, str]]:
        out, self.calls = self.calls, []
        return out


@dataclass
class Placement:
    ref: Any
    told: Told

    async def tell(self, msg: pl.PlacementMsg) -> None:
        await self.ref.tell(msg)
        await self.settle()

    async def settle(self) -> None:
        await self.ref.ask(pl.Loads())  # handled after everything sent before it


@pytest.fixture
async def placement(tmp_path: Path) -> AsyncIterator[Placement]:
    store = open_store("memory", tmp_path)
    await store.open()
    told = Told()

    async def assign(job_id: str, node_id: str) -> pl.Handover:
        return pl.Handover(taken=True)

    sup = Supervisor(
        [
            ChildSpec(
                "placement",
                lambda: pl.PlacementActor(store=store, assign=assign, tell_reason=told),
            )
        ],
        name="test",
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        try:
            yield Placement(sup.child("placement"), told)
        finally:
            await sup.stop()
            await store.close()


def small_node(node_id: str = "node_small") -> NodeShape:
    return NodeShape(node_id, cpu_cores=1, ram_gb=64, max_concurrency=4)


async def test_placement_tells_a_reason_once_per_change_and_throttles_changes(
    placement: Placement, autojump_clock: Any
) -> None:
    for i in range(3):
        await placement.tell(pl.Enqueue(f"job_{i}", 0, shell_spec(cpu=2)))
    # each job told once, though every enqueue ran a plan over the whole queue
    assert sorted(placement.told.take()) == [(f"job_{i}", pl.NO_NODES) for i in range(3)]
    await placement.tell(pl.Enqueue("job_3", 0, shell_spec(cpu=2)))
    assert placement.told.take() == [("job_3", pl.NO_NODES)]

    # a node too small joins: every reason changes, but they were told just now
    await placement.tell(pl.NodeUp(small_node()))
    assert placement.told.take() == []
    reasons = await placement.ref.ask(pl.WaitReasons(("job_0",)))
    assert reasons["job_0"].startswith("no node meets")
    # flapping meanwhile (gone, back): only the reason standing when the time is up counts
    await placement.tell(pl.NodeDown("node_small"))
    await placement.tell(pl.NodeUp(small_node()))
    await trio.sleep(pl.REASON_EVERY + 1)
    await placement.settle()
    told = placement.told.take()
    assert sorted(job for job, _ in told) == [f"job_{i}" for i in range(4)]
    assert all(reason == reasons["job_0"] for _, reason in told)

    # back to the reason told last, within the period: nothing to tell at all
    await placement.tell(pl.NodeDown("node_small"))
    await placement.tell(pl.NodeUp(small_node()))
    await trio.sleep(pl.REASON_EVERY * 2)
    await placement.settle()
    assert placement.told.take() == []

    # a job off the queue is forgotten: nothing told for it later
    await placement.tell(pl.Dequeue("job_0"))
    await placement.tell(pl.NodeDown("node_small"))
    await trio.sleep(pl.REASON_EVERY * 2)
    await placement.settle()
    assert sorted(placement.told.take()) == [(f"job_{i}", pl.NO_NODES) for i in (1, 2, 3)]


async def test_placement_retries_a_reason_it_could_not_tell(
    placement: Placement, autojump_clock: Any
) -> None:
    placement.told.refuse = True  # the job actor is not active yet, or its mailbox is full
    await placement.tell(pl.Enqueue("job_a", 0, shell_spec(cpu=2)))
    assert placement.told.take() == []
    placement.told.refuse = False
    await trio.sleep(pl.REASON_TICK * 2)
    await placement.settle()
    assert placement.told.take() == [("job_a", pl.NO_NODES)]


# -- the whole path: placement -> job actor -> store -> follow ---------------------------


@pytest.fixture
async def root(tmp_path: Path) -> AsyncIterator[Root]:
    store = open_store(None, tmp_path / "data")
    await store.open()
    settings = load_settings(
        {"RUNPLANE_DATA_DIR": str(tmp_path / "data"), "RUNPLANE_LOCAL_AGENT": "0"}
    )
    root = Root(settings, store, CATALOG)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(root.run)
            try:
                yield root
            finally:
                with trio.CancelScope(shield=True):
                    await root.stop()
                nursery.cancel_scope.cancel()
    finally:
        await store.close()


async def next_reason(follower: AsyncIterator[list[JobEvent]]) -> dict[str, Any]:
    with trio.fail_after(20):
        async for batch in follower:
            for event in batch:
                data = payload(event)
                if event.kind == "phase" and "reason" in data:
                    return data
    raise AssertionError("the stream ended without a reason")


async def test_a_queued_job_without_a_node_streams_why_it_waits(
    root: Root, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pl, "REASON_EVERY", 0.05)
    body = SubmitJobBody.model_validate({"stack": "shell", "limits": {"cpu_cores": 2}})
    job_id = (await root.jobs.submit(body, Submitter("org_default", "usr_a"))).row.id
    follower = root.jobs.follow(job_id, 0)
    first = await next_reason(follower)
    assert first == {
        "kind": "phase",
        "job_id": job_id,
        "seq": first["seq"],
        "phase": "queued",
        "reason": pl.NO_NODES,
    }
    row = await fresh_row(root.store, job_id)
    assert row.phase is Phase.QUEUED and row.wait_reason == pl.NO_NODES
    # a node that cannot take it: the stream says why, once
    await root.placement.tell(pl.NodeUp(small_node()))
    second = await next_reason(follower)
    assert second["reason"].startswith("no node meets") and second["seq"] > first["seq"]
    await root.jobs.cancel(job_id, None)
    async for batch in follower:  # ends after the cancelled phase, with no other reason
        assert all("reason" not in payload(e) for e in batch)
    events = await stored(root.store, job_id)
    assert [payload(e).get("reason") for e in events if e.kind == "phase"] == [
        None,
        pl.NO_NODES,
        second["reason"],
        None,
    ]
