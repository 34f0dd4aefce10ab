"""A fixed-bucket latency histogram, cheap enough for hot paths (one bisect, two adds).

The store's writer, the submit path and others keep one; ``/metrics`` turns them into
Prometheus histograms (runplane/services/telemetry.py). It has no dependencies, so the
lowest layers can hold one.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

#: Upper bounds in seconds, from 0.5 ms to 10 s (Prometheus' default span, finer below).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


@dataclass(slots=True)
class Histogram:
    bounds: tuple[float, ...] = LATENCY_BUCKETS
    #: observations per bucket (not cumulative); the last counts those above every bound
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def copy(self) -> Histogram:
        return Histogram(self.bounds, list(self.counts), self.total)

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, count)`` pairs as Prometheus exposes them, ending with ``+Inf``."""
        out, running = [], 0
        for bound, n in zip((*map(str, self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out
