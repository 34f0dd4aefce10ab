"""Broadcast without backpressure: replayable rings, and a hub of them.

Publishing never blocks and never waits for a subscriber; a subscriber that
falls behind loses items and is told how many with :class:`Lagged`.

- :class:`Ring`: a per-stream ring buffer with sequence numbers from 1, and a
  cursor per subscriber reading the shared ring (tractor's
  ``trionics/_broadcast.py``; Centrifugo's offset history): replay from a
  sequence number, then the live tail.
- :class:`Hub`: named rings, made on demand, discarded explicitly;
  closed rings are kept for late replay up to a bound.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar
from weakref import WeakSet

import trio
from trio.lowlevel import ParkingLot, cancel_shielded_checkpoint, checkpoint_if_cancelled

from .errors import Lagged

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class RingStatistics:
    name: str
    size: int  # items retained
    capacity: int
    first_seq: int  # oldest retained (== last_seq + 1 when empty)
    last_seq: int  # newest published (0 before the first)
    subscribers: int
    dropped: int  # items cursors skipped because they lagged
    closed: bool


@dataclass(frozen=True, slots=True)
class HubStatistics:
    rings: int
    closed_rings: int
    retained: int  # items held by all rings


class _Closing:
    """``with`` support: leaving the block closes the subscription."""

    def close(self) -> None:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# -- rings --------------------------------------------------------------------


class Cursor(_Closing, Generic[T]):
    """A subscriber's position in a :class:`Ring`: ``next_seq`` is what it reads next.

    ``receive`` returns ``(seq, item)``. If the ring overwrote items the cursor
    had not read, it raises :class:`Lagged` with their exact count, and the
    next ``receive`` resumes at the oldest retained item. ``trio.EndOfChannel``
    once the ring is closed and everything is read.
    """

    def __init__(self, ring: Ring[T], next_seq: int) -> None:
        self._ring = ring
        self.next_seq = next_seq
        self._closed = False

    async def receive(self) -> tuple[int, T]:
        await checkpoint_if_cancelled()
        ring = self._ring
        while True:
            if self._closed:
                raise trio.ClosedResourceError("cursor is closed")
            if self.next_seq <= ring.last_seq:
                first = ring.first_seq
                if self.next_seq < first:
                    dropped = first - self.next_seq
                    self.next_seq = first
                    ring._dropped += dropped
                    await cancel_shielded_checkpoint()
                    raise Lagged(dropped)
                seq = self.next_seq
                item = ring._item(seq)
                self.next_seq += 1
                await cancel_shielded_checkpoint()
                return seq, item
            if ring.closed:
                raise trio.EndOfChannel
            await ring._lot.park()

    async def receive_many(self, limit: int) -> list[tuple[int, T]]:
        """Like :meth:`receive`, but every item ready now, up to ``limit`` (at least one:
        it waits for the first). A subscriber that writes to a socket sends them in one
        write instead of one per item. ``Lagged`` and ``EndOfChannel`` as for ``receive``."""
        if limit < 1:
            raise ValueError("limit must be >= 1")
        seq, item = await self.receive()
        ring = self._ring
        out = [(seq, item)]
        start = self.next_seq
        if start < ring.first_seq:  # overwritten while receive() yielded: the next one lags
            return out
        end = min(ring.last_seq, start + limit - 2)
        out.extend((more, ring._item(more)) for more in range(start, end + 1))
        self.next_seq = max(start, end + 1)
        return out

    def close(self) -> None:
        """Stop following the ring (also on leaving ``with``)."""
        if not self._closed:
            self._closed = True
            self._ring._cursors.discard(self)

    def __enter__(self) -> Cursor[T]:
        return self

    def __aiter__(self) -> Cursor[T]:
        return self

    async def __anext__(self) -> tuple[int, T]:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None


class Ring(Generic[T]):
    """The last ``capacity`` items of a stream, numbered from ``next_seq`` (default 1).

    The publisher writes and wakes readers; every reader has its own cursor,
    so nothing a reader does can hold the publisher or another reader up.
    """

    def __init__(self, name: str = "", *, capacity: int = 1024, next_seq: int = 1) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        if next_seq < 1:
            raise ValueError("next_seq must be >= 1")
        self.name = name
        self.capacity = capacity
        # grown on publish up to ``capacity``: a ring of a quiet job or stream costs a
        # few hundred bytes, not ``capacity`` slots
        self._slots: list[Any] = []
        self._base = next_seq
        self._last = next_seq - 1
        self._size = 0
        self._lot = ParkingLot()
        self._cursors: WeakSet[Cursor[T]] = WeakSet()
        self._dropped = 0
        self._closed = False
        self._on_close: Callable[[Ring[T]], None] | None = None

    @property
    def last_seq(self) -> int:
        """Sequence number of the newest item (``next_seq - 1`` before any)."""
        return self._last

    @property
    def first_seq(self) -> int:
        """Sequence number of the oldest retained item (``last_seq + 1`` if empty)."""
        return self._last - self._size + 1

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def subscribers(self) -> int:
        """Open cursors on this ring."""
        return len(self._cursors)

    def publish(self, item: T) -> int:
        """Append ``item``, overwriting the oldest when full; returns its seq."""
        if self._closed:
            raise trio.ClosedResourceError(f"ring {self.name!r} is closed")
        self._last += 1
        index = (self._last - self._base) % self.capacity
        if index == len(self._slots):
            self._slots.append(item)
        else:
            self._slots[index] = item
        self._size = min(self._size + 1, self.capacity)
        self._lot.unpark_all()
        return self._last

    def _item(self, seq: int) -> T:
        item: T = self._slots[(seq - self._base) % self.capacity]
        return item

    def retained(self, after_seq: int = 0) -> list[tuple[int, T]]:
        """The retained ``(seq, item)`` pairs with ``seq > after_seq``."""
        start = max(after_seq + 1, self.first_seq)
        return [(seq, self._item(seq)) for seq in range(start, self._last + 1)]

    def subscribe(self, *, from_seq: int | None = None) -> Cursor[T]:
        """A cursor (use ``with``) reading items after ``from_seq``, then the live tail.

        ``from_seq`` is the last seq the subscriber already has (``0``: from the
        start; ``None``: only items published from now on). Items after it
        that are no longer retained are reported by :class:`Lagged`. A
        ``from_seq`` beyond ``last_seq`` means "from now on".
        """
        if from_seq is not None and from_seq < 0:
            raise ValueError("from_seq must be >= 0")
        start = self._last if from_seq is None else min(from_seq, self._last)
        cursor = Cursor(self, start + 1)
        self._cursors.add(cursor)
        return cursor

    def close(self) -> None:
        """No more items: cursors read what is retained, then their iteration ends."""
        if not self._closed:
            self._closed = True
            self._lot.unpark_all()
            if self._on_close is not None:
                self._on_close(self)

    def statistics(self) -> RingStatistics:
        return RingStatistics(
            name=self.name,
            size=self._size,
            capacity=self.capacity,
            first_seq=self.first_seq,
            last_seq=self._last,
            subscribers=len(self._cursors),
            dropped=self._dropped,
            closed=self._closed,
        )


# -- hub ----------------------------------------------------------------------


class Hub:
    """Named rings, created on first use.

    Memory stays bounded: every ring holds at most ``ring_capacity`` items, a
    ring is dropped by :meth:`discard_ring`, and closed rings (finished
    streams, kept for late replay) beyond ``max_closed_rings`` are dropped
    oldest-closed first.
    """

    def __init__(
        self,
        *,
        ring_capacity: int = 1024,
        max_closed_rings: int = 1000,
    ) -> None:
        self.ring_capacity = ring_capacity
        self.max_closed_rings = max_closed_rings
        self._rings: dict[str, Ring[Any]] = {}
        self._closed_rings: OrderedDict[str, None] = OrderedDict()

    def ring_subscribers(self, prefix: str) -> int:
        """Open cursors on the rings whose names start with ``prefix`` (``job/``: job
        event followers; ``stream/``: stream subscribers)."""
        return sum(r.subscribers for name, r in self._rings.items() if name.startswith(prefix))

    def ring(self, name: str, *, next_seq: int = 1, capacity: int | None = None) -> Ring[Any]:
        """The ring ``name``, created if needed (``next_seq`` and ``capacity``, by default
        the hub's ``ring_capacity``, apply to a new one).

        A closed ring is returned as is (for replay) until it is discarded.
        """
        ring = self._rings.get(name)
        if ring is None:
            size = capacity if capacity is not None else self.ring_capacity
            ring = Ring(name, capacity=size, next_seq=next_seq)
            ring._on_close = self._ring_closed
            self._rings[name] = ring
        return ring

    def find_ring(self, name: str) -> Ring[Any] | None:
        """The ring ``name`` if it exists; never creates one."""
        return self._rings.get(name)

    def discard_ring(self, name: str) -> None:
        """Close and forget the ring ``name``: its cursors drain and end."""
        ring = self._rings.pop(name, None)
        self._closed_rings.pop(name, None)
        if ring is not None:
            ring._on_close = None
            ring.close()

    def _ring_closed(self, ring: Ring[Any]) -> None:
        if self._rings.get(ring.name) is not ring:
            return
        self._closed_rings[ring.name] = None
        while len(self._closed_rings) > self.max_closed_rings:
            oldest, _ = self._closed_rings.popitem(last=False)
            self._rings.pop(oldest, None)

    def statistics(self) -> HubStatistics:
        return HubStatistics(
            rings=len(self._rings),
            closed_rings=len(self._closed_rings),
            retained=sum(ring._size for ring in self._rings.values()),
        )
