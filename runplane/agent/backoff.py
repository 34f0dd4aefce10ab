"""Reconnect delays of the node agent: exponential backoff with jitter.

:class:`Backoff` spaces the agent's connection attempts: the n-th retry waits a random time
in ``[d/2, d]`` with ``d = min(maximum, minimum * 2**n)``, and :meth:`Backoff.reset` starts
over after a successful welcome. ``BACKOFF_MIN_SEC``/``BACKOFF_MAX_SEC`` are the defaults.
"""

from __future__ import annotations

import random

#: Reconnect delays: the n-th retry waits a random time in [d/2, d], d = min(MAX, MIN * 2**n).
BACKOFF_MIN_SEC = 0.5
BACKOFF_MAX_SEC = 30.0


class Backoff:
    """Exponential backoff with jitter: retry n waits uniform(d/2, d), d = min(max, min*2**n)."""

    def __init__(
        self,
        minimum: float = BACKOFF_MIN_SEC,
        maximum: float = BACKOFF_MAX_SEC,
        rng: random.Random | None = None,
    ) -> None:
        self.minimum = minimum
        self.maximum = maximum
        self.attempts = 0
        self._rng = rng or random.Random()

    def ceiling(self, attempt: int) -> float:
        return min(self.maximum, self.minimum * 2.0 ** min(attempt, 62))

    def next_delay(self) -> float:
        ceiling = self.ceiling(self.attempts)
        self.attempts += 1
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempts = 0
