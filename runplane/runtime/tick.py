"""One timer for many waiters: :class:`SharedTick`.

Many tasks that each wait "about this long" (a stream's followers between two writes,
docs/streams.md) cost trio a timer each: at 1,000 followers of a 100 Hz stream that is
10,000 deadlines a second to register and expire, a third of the server's work
(docs/benchmarks.md, "Performance round 3: the targets"). A :class:`SharedTick` lets
them share one: the first waiter sleeps, every waiter that arrives meanwhile parks, and
when the sleep ends (or is cancelled) all of them wake together. Nobody waits longer than
the delay it asked; a waiter that arrives late in a sleep waits less.
"""

from __future__ import annotations

import trio
from trio.lowlevel import ParkingLot


class SharedTick:
    """A timer shared by whoever waits on it at the same time."""

    def __init__(self) -> None:
        self._lot = ParkingLot()
        self._sleeping = False

    @property
    def waiting(self) -> int:
        """How many tasks are parked on the running sleep (tests, statistics)."""
        return len(self._lot)

    async def wait(self, delay: float) -> None:
        """Return after at most ``delay`` seconds: at the end of the sleep another waiter
        is already in, or after a sleep of ``delay`` of this task's own."""
        if self._sleeping:
            await self._lot.park()
            return
        self._sleeping = True
        try:
            await trio.sleep(delay)
        finally:  # cancelled too: the parked ones must not wait for a sleep that ended
            self._sleeping = False
            self._lot.unpark_all()
