"""Rate-limited repetition: :class:`OnceEvery` lets a repeated log line out at most once
per interval and counts the ones it held back, so a fault that repeats many times a
second (a store outage, a child crashing in a loop) is logged once per interval, with how
many times it happened meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class OnceEvery:
    """True at most once per ``interval`` seconds of ``clock`` (default
    ``time.monotonic``; the runtime passes its trio clock, so tests drive it)."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self._clock = clock
        self._last = -float("inf")
        #: how many calls were refused since the last one allowed
        self.suppressed = 0

    def __call__(self, *, force: bool = False) -> bool:
        """Whether to go ahead now; ``force`` goes ahead whatever the interval (and
        starts a new one)."""
        now = self._clock()
        if not force and now - self._last < self.interval:
            self.suppressed += 1
            return False
        self._last = now
        return True

    def take_suppressed(self) -> int:
        """The refused calls since the last allowed one; resets the count."""
        count, self.suppressed = self.suppressed, 0
        return count
