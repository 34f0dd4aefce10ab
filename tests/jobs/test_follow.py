"""The follow protocol (``runplane/jobs/follow.py``) as a domain function, without Quart.

A fake in-memory :class:`Source` (a list as the store, a real hub ring as the live side)
drives :func:`follow` through its paths: history only, history then live, the race between
the replay and the subscription, ring duplicates, lag, a closed ring, idle keepalives and
paging. Every test checks the exact sequence numbers delivered: each once, in order.
The fake-source tests run on trio's autojump clock, so a follower that waits when it
should not fails at once (an idle keepalive, or ``HUNG``) instead of hanging the run. The
last test runs the real :class:`JobEventSource` over a real store.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, cast

import trio
import trio.testing

from runplane.jobs import repo
from runplane.jobs.events import JobEvent, log_event, metric_event, phase_event
from runplane.jobs.follow import JobEventSource, follow
from runplane.jobs.phase import JobState, Phase
from runplane.jobs.spec import SubmitJobBody, resolve
from runplane.persistence import Store, now_ms
from runplane.runtime import Hub, Ring
from runplane.stacks import load_catalog

#: Virtual seconds after which a follower that should have ended (or answered) is hung.
HUNG = 3600.0
#: Store reads after which a follower counts as spinning (no test needs a tenth of it).
MAX_READS = 1000


@dataclass(frozen=True, slots=True)
class Item:
    seq: int
    end: bool = False


def items(seqs: Iterable[int], *, end: int | None = None) -> list[Item]:
    return [Item(seq, end=seq == end) for seq in seqs]


class FakeSource:
    """A job's stream in memory: ``stored`` is the store, ``ring`` the live ring.

    ``emit`` is what the job actor does: store first, then publish. ``on_live`` runs when
    the follower asks for the ring, before it subscribes (what the producer does between
    the first replay and the subscription)."""

    def __init__(self, stored: Iterable[Item] = (), ring: Ring[Item] | None = None) -> None:
        self.stored: list[Item] = list(stored)
        self.ring = ring
        self.reads: list[tuple[int, int]] = []  # (after seq, limit) of each stored_after
        self.live_calls = 0
        self.on_live: Callable[[], None] | None = None

    async def stored_after(self, seq: int, limit: int) -> list[Item]:
        await trio.lowlevel.checkpoint()
        self.reads.append((seq, limit))
        assert len(self.reads) <= MAX_READS, "the follower spins on the store"
        return [item for item in self.stored if item.seq > seq][:limit]

    async def live(self) -> Ring[Item]:
        await trio.lowlevel.checkpoint()
        self.live_calls += 1
        if self.on_live is not None:
            self.on_live()
        assert self.ring is not None, "live() called on a stream that has no ring"
        return self.ring

    def store(self, item: Item) -> None:
        assert not self.stored or item.seq == self.stored[-1].seq + 1
        self.stored.append(item)

    def publish(self, item: Item) -> None:
        assert self.ring is not None
        assert self.ring.publish(item) == item.seq  # the ring numbers like the store

    def emit(self, item: Item) -> None:
        self.store(item)
        self.publish(item)


def ring_after(last_seq: int, *, capacity: int = 1024) -> Ring[Item]:
    """A fresh job ring whose next item is ``last_seq + 1`` (as the job actor opens it)."""
    return Hub(ring_capacity=capacity).ring("job/j1", next_seq=last_seq + 1)


def following(source: FakeSource, since: int, **options: Any) -> AsyncGenerator[list[Item], None]:
    """:func:`follow` typed as the async generator it is (for ``aclosing``)."""
    return cast(AsyncGenerator[list[Item], None], follow(source, since, **options))


async def drain(stream: AsyncIterator[list[Item]]) -> list[list[int]]:
    """The seqs of every batch until the stream ends."""
    with trio.fail_after(HUNG):
        return [[item.seq for item in batch] async for batch in stream]


async def step(stream: AsyncIterator[list[Item]]) -> list[int]:
    """The seqs of the next batch."""
    with trio.fail_after(HUNG):
        return [item.seq for item in await anext(stream)]


async def when_blocked(fn: Callable[[], None]) -> None:
    """Run ``fn`` once every other task waits (the follower is parked on the ring)."""
    await trio.testing.wait_all_tasks_blocked()
    fn()


def flat(batches: list[list[int]]) -> list[int]:
    return [seq for batch in batches for seq in batch]


# -- history ----------------------------------------------------------------------------


async def test_history_only_yields_all_in_order_and_never_goes_live(autojump_clock: Any) -> None:
    source = FakeSource(items(range(1, 6), end=5))  # ring None: live() would fail the test
    batches = await drain(follow(source, 0))
    assert batches == [[1, 2, 3, 4, 5]]
    assert source.live_calls == 0


async def test_since_in_the_middle_yields_only_later_items(autojump_clock: Any) -> None:
    source = FakeSource(items(range(1, 8), end=7))
    batches = await drain(follow(source, 4))
    assert batches == [[5, 6, 7]]
    assert source.reads[0][0] == 4
    assert source.live_calls == 0


async def test_nothing_after_the_end_item_is_delivered(autojump_clock: Any) -> None:
    # a stored item past the end (never written by a job actor) is not read past the end
    source = FakeSource([*items(range(1, 4), end=3), Item(4)])
    assert await drain(follow(source, 0)) == [[1, 2, 3]]
    assert source.live_calls == 0


async def test_more_stored_items_than_a_page_come_in_several_batches(autojump_clock: Any) -> None:
    source = FakeSource(items(range(1, 8), end=7))
    batches = await drain(follow(source, 0, page=3))
    assert batches == [[1, 2, 3], [4, 5, 6], [7]]
    assert [after for after, _ in source.reads] == [0, 3, 6]
    assert {limit for _, limit in source.reads} == {3}
    assert source.live_calls == 0


# -- live -------------------------------------------------------------------------------


async def test_history_then_live_items_each_once_in_order(autojump_clock: Any) -> None:
    source = FakeSource(items([1, 2, 3]), ring_after(3))

    def produce() -> None:  # the job actor: store first, then publish
        for item in items([4, 5, 6], end=6):
            source.emit(item)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(when_blocked, produce)
        batches = await drain(follow(source, 0))
    assert batches == [[1, 2, 3], [4, 5, 6]]  # the history, then the live items
    assert source.live_calls == 1


async def test_a_live_end_item_ends_the_stream_even_if_more_follow(autojump_clock: Any) -> None:
    # the end item arrives in the same ring batch as items after it: none of those is sent
    source = FakeSource(items([1]), ring_after(1))

    def produce() -> None:
        for item in items([2, 3, 4, 5], end=3):
            source.emit(item)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(when_blocked, produce)
        batches = await drain(follow(source, 0))
    assert batches == [[1], [2, 3]]


async def test_item_stored_but_not_yet_published_at_subscription_is_delivered_once(
    autojump_clock: Any,
) -> None:
    # the race the protocol exists for: the producer stores 3 after the first replay read
    # the store and has not published it yet when the follower subscribes (store first,
    # then publish). The replay after subscribing delivers it at once, without waiting for
    # the ring (a follower that waited would get an idle keepalive here), and the ring's
    # copy, published afterwards, is not repeated.
    source = FakeSource(items([1, 2]), ring_after(2))
    source.on_live = lambda: source.store(Item(3))
    async with aclosing(following(source, 0)) as stream:
        assert await step(stream) == [1, 2]
        assert await step(stream) == [3]
        source.publish(Item(3))  # the producer catches up
        source.emit(Item(4, end=True))
        assert await drain(stream) == [[4]]
    assert source.live_calls == 1


async def test_item_stored_before_the_ring_was_opened_is_delivered_once(
    autojump_clock: Any,
) -> None:
    # the same race for a job whose actor was not running: activation (during live())
    # stores 3 and opens the ring after it, so the ring never carries 3
    source = FakeSource(items([1, 2]))

    def activate() -> None:
        source.store(Item(3))
        source.ring = ring_after(3)

    source.on_live = activate
    async with trio.open_nursery() as nursery:
        nursery.start_soon(when_blocked, lambda: source.emit(Item(4, end=True)))
        batches = await drain(follow(source, 0))
    assert flat(batches) == [1, 2, 3, 4]
    assert batches[0] == [1, 2] and batches[-1] == [4]
    assert source.live_calls == 1


async def test_ring_items_the_replay_already_delivered_are_skipped(autojump_clock: Any) -> None:
    # 3 and 4 are stored and published between the first replay and the subscription:
    # the replay after subscribing delivers them, then the ring hands them over again
    # (the cursor starts after 2) and the follower skips them
    source = FakeSource(items([1, 2]), ring_after(0))
    for item in source.stored:
        source.publish(item)

    def producer_runs_meanwhile() -> None:
        for item in items([3, 4]):
            source.emit(item)

    source.on_live = producer_runs_meanwhile
    async with aclosing(following(source, 0)) as stream:
        assert await step(stream) == [1, 2]
        assert await step(stream) == [3, 4]
        async with trio.open_nursery() as nursery:
            # the follower reads 3 and 4 off the ring, skips them and waits again
            nursery.start_soon(when_blocked, lambda: source.emit(Item(5, end=True)))
            assert await drain(stream) == [[5]]


async def test_a_lagging_follower_refills_from_the_store(autojump_clock: Any) -> None:
    source = FakeSource(items([1, 2]), ring_after(2, capacity=2))
    assert source.ring is not None
    async with aclosing(following(source, 0)) as stream:
        assert await step(stream) == [1, 2]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(when_blocked, lambda: source.emit(Item(3)))
            assert await step(stream) == [3]  # live, from the ring
        # the follower is slow (not iterating): more than the ring holds is published
        for item in items(range(4, 11), end=10):
            source.emit(item)
        assert source.ring.first_seq == 9  # 4..8 were overwritten before it read them
        reads = len(source.reads)
        assert await drain(stream) == [[4, 5, 6, 7, 8, 9, 10]]
    assert source.ring.statistics().dropped == 5  # its cursor lagged by 4..8
    assert source.reads[reads:] == [(3, 1000)]  # and it refilled from the store


async def test_a_follower_lagging_again_and_again_gets_every_seq_once(
    autojump_clock: Any,
) -> None:
    # a long stream through a tiny ring, a follower that reads little at a time: it lags
    # over and over, and still gets every item once, in order
    source = FakeSource(items([1]), ring_after(1, capacity=3))
    assert source.ring is not None
    last = 200

    async def producer() -> None:
        await trio.testing.wait_all_tasks_blocked()
        for seq in range(2, last + 1):
            source.emit(Item(seq, end=seq == last))
            if seq % 7 == 0:  # 7 items at a time: more than the ring holds
                await trio.lowlevel.checkpoint()

    got: list[int] = []
    async with aclosing(following(source, 0, batch=2)) as stream:
        got += await step(stream)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(producer)
            with trio.fail_after(HUNG):
                async for batch in stream:
                    got += [item.seq for item in batch]
                    await trio.lowlevel.checkpoint()  # slow: the producer runs ahead
    assert got == list(range(1, last + 1))
    assert source.ring.statistics().dropped > 0


async def test_ring_closed_without_an_end_item_refills_from_the_store_and_returns(
    autojump_clock: Any,
) -> None:
    # the producer stopped: 3 was published, 4 stored but never published, then the
    # ring closed; the follower reads 3 off the ring, 4 from the store, and returns
    source = FakeSource(items([1, 2]), ring_after(2))
    assert source.ring is not None
    ring = source.ring

    def producer_stops() -> None:
        source.emit(Item(3))
        source.store(Item(4))
        ring.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(when_blocked, producer_stops)
        batches = await drain(follow(source, 0))
    assert batches == [[1, 2], [3], [4]]
    assert not any(item.end for item in source.stored)


async def test_idle_yields_an_empty_batch_then_items_continue(autojump_clock: Any) -> None:
    source = FakeSource(items([1]), ring_after(1))
    async with aclosing(following(source, 0, idle=10.0)) as stream:
        assert await step(stream) == [1]
        assert await step(stream) == []  # nothing for `idle` seconds: a keepalive
        assert await step(stream) == []  # and another
        async with trio.open_nursery() as nursery:
            nursery.start_soon(when_blocked, lambda: source.emit(Item(2)))
            assert await step(stream) == [2]
        async with trio.open_nursery() as nursery:
            nursery.start_soon(when_blocked, lambda: source.emit(Item(3, end=True)))
            assert await drain(stream) == [[3]]


# -- the job's source over a real store ----------------------------------------------------


async def test_job_event_source_replays_a_finished_job_from_the_store(store: Store) -> None:
    resolved = resolve(SubmitJobBody(stack="shell", seed=1, project="p"), load_catalog())
    job_id = "job_follow1"
    job = repo.NewJob(
        id=job_id,
        org_id="org_x",
        project=resolved.project,
        submitted_by="u",
        spec=resolved.spec,
        spec_hash=resolved.spec_hash,
        priority=0,
    )
    await store.transaction(repo.insert_job(store, job))  # seq 1: the queued phase event
    now = now_ms()
    events = [
        phase_event(job_id, 2, Phase.ASSIGNED.value, now),
        phase_event(job_id, 3, Phase.PULLING.value, now),
        phase_event(job_id, 4, Phase.RUNNING.value, now),
        log_event(job_id, 5, "stdout", "hello", now),
        metric_event(job_id, 6, 1, {"loss": 0.5}, now),
        log_event(job_id, 7, "stderr", "bye", now),
        phase_event(job_id, 8, Phase.SUCCEEDED.value, now),
    ]
    state = JobState(Phase.SUCCEEDED, attempt=1, node_id="n1", started_at=now, finished_at=now)
    await store.transaction(repo.save_state(job_id, state, events, 8))

    activations: list[str] = []

    async def activate() -> None:
        activations.append(job_id)

    hub = Hub()
    source = JobEventSource(store, hub, job_id, activate)
    got: list[JobEvent] = []
    async for batch in follow(source, 0, page=3):
        got += batch
    assert [e.seq for e in got] == list(range(1, 9))
    assert [e.kind for e in got] == ["phase"] * 4 + ["log", "metric", "log", "phase"]
    assert [e.end for e in got] == [False] * 7 + [True]
    assert activations == []  # a finished job is served from the store alone
    assert hub.find_ring(f"job/{job_id}") is None

    tail: list[JobEvent] = []
    async for batch in follow(source, 5):
        tail += batch
    assert [e.seq for e in tail] == [6, 7, 8]
    assert activations == []
