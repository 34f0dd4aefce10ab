"""Following a stream of sequenced items: the stored history, then the live ring.

The protocol the job telemetry SSE route (and any other replayable stream) speaks, free of
HTTP: :func:`follow` yields batches of items with increasing ``seq``, starting after
``since``, each exactly once, and ends after an item marked ``end``. It first pages
through the store; then subscribes to the live ring and pages through the store once more
(what was stored between the first replay and the subscription); then follows the ring,
skipping what it already sent. A subscriber that falls behind the ring (``Lagged``), or
a ring that closes, refills from the store. Every item is stored before it is published,
so the two sources meet without a gap. An empty batch means "nothing for ``idle``
seconds" (the SSE route sends a keepalive).

:class:`JobEventSource` is the job's: rows of ``job_events`` and the ``job/<id>`` ring.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Protocol, TypeVar

import trio

from runplane.persistence import Store
from runplane.runtime import Cursor, Hub, Lagged, Ring

from . import repo
from .events import JobEvent, ring_name

#: Seconds without an item before an empty batch (a keepalive) is yielded.
IDLE_SEC = 15.0
#: Items read from the store per page.
REPLAY_PAGE = 1000
#: Most live items one batch carries (whatever is ready when the follower wakes).
LIVE_BATCH = 512


class Item(Protocol):
    @property
    def seq(self) -> int: ...

    @property
    def end(self) -> bool: ...


T = TypeVar("T", bound=Item)


class Source(Protocol[T]):
    async def stored_after(self, seq: int, limit: int) -> list[T]:
        """Stored items with ``seq`` greater than ``seq``, in order, at most ``limit``."""
        ...

    async def live(self) -> Ring[T]:
        """The ring the live items are published on (starting its producer if need be)."""
        ...


async def _receive(
    cursor: Cursor[T], batch: int, idle: float
) -> tuple[list[tuple[int, T]], bool, bool]:
    """What the ring has for the follower within ``idle`` seconds (up to ``batch``), and
    whether the follower lagged behind the ring or the ring closed: (got, lagged, closed)."""
    with trio.move_on_after(idle):
        try:
            return await cursor.receive_many(batch), False, False
        except Lagged:
            return [], True, False
        except trio.EndOfChannel:
            return [], False, True
    return [], False, False


async def follow(
    source: Source[T],
    since: int,
    *,
    idle: float = IDLE_SEC,
    page: int = REPLAY_PAGE,
    batch: int = LIVE_BATCH,
) -> AsyncIterator[list[T]]:
    """Batches of the items after ``since``: history, then live; see the module doc."""
    last = since
    ended = False

    def take(items: Iterable[tuple[int, T]]) -> list[T]:
        """The items not sent yet, in order, up to and with the end item."""
        nonlocal last, ended
        out: list[T] = []
        for seq, item in items:
            if seq <= last:
                continue
            last = seq
            out.append(item)
            if item.end:
                ended = True
                break
        return out

    async def replay() -> AsyncIterator[list[T]]:
        while not ended:
            items = await source.stored_after(last, page)
            out = take((item.seq, item) for item in items)
            if out:
                yield out
            if ended or len(items) < page:
                return

    async for out in replay():
        yield out
    if ended:
        return
    ring = await source.live()
    with ring.subscribe(from_seq=last) as cursor:
        async for out in replay():  # what was stored between the replay and the subscription
            yield out
        while not ended:
            got, lagged, finished = await _receive(cursor, batch, idle)
            if lagged or finished:  # refill from the store (and the end item)
                async for out in replay():
                    yield out
                if finished:
                    return
                continue
            if not got:
                yield []  # idle
                continue
            out = take(got)
            if out:
                yield out


class JobEventSource:
    """A job's telemetry: ``job_events`` rows and the ``job/<id>`` ring of its actor;
    ``activate`` starts the job's actor (which opens the ring) when it is not running."""

    def __init__(
        self, store: Store, hub: Hub, job_id: str, activate: Callable[[], Awaitable[object]]
    ) -> None:
        self.store = store
        self.hub = hub
        self.job_id = job_id
        self.activate = activate

    async def stored_after(self, seq: int, limit: int) -> list[JobEvent]:
        events = await repo.events_after(self.store, self.job_id, seq, limit=limit)
        return [JobEvent.of(e, end=e.ends_stream) for e in events]

    async def live(self) -> Ring[JobEvent]:
        name = ring_name(self.job_id)
        ring = self.hub.find_ring(name)
        if ring is None:  # a live job whose actor is not active yet: activate it
            await self.activate()
            ring = self.hub.ring(name)
        return ring
