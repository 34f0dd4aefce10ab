"""When a schedule's occurrences fall: a 5-field cron expression in an IANA time zone
(cronsim: DST-aware, so a 02:30 that a spring-forward skips runs at the next valid minute
and one an autumn fall-back repeats runs once), or a fixed interval (``every``) counted
from the schedule's anchor. Times are unix milliseconds."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

MIN_EVERY_SEC = 1
MAX_EVERY_SEC = 366 * 24 * 3600
_UNITS = {"d": 86400, "h": 3600, "m": 60, "s": 1}
_EVERY = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")


def parse_every(text: str) -> int:
    """Seconds of an interval such as ``30s``, ``5m``, ``1h30m``, ``2d``; ValueError."""
    match = _EVERY.match(text.strip())
    if not text.strip() or match is None:
        raise ValueError("an interval is like 30s, 5m, 1h30m or 2d (units d, h, m, s)")
    seconds = sum(
        int(n) * unit for n, unit in zip(match.groups(), _UNITS.values(), strict=True) if n
    )
    if not MIN_EVERY_SEC <= seconds <= MAX_EVERY_SEC:
        raise ValueError(f"an interval is from {MIN_EVERY_SEC} s to 366 days")
    return seconds


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {name!r}; use an IANA name like Europe/Berlin"
        ) from None


def check_cron(expr: str) -> str:
    """The expression, normalized; ValueError naming what is wrong."""
    fields = expr.split()
    if len(fields) != 5:
        raise ValueError("a cron expression has 5 fields: minute hour day-of-month month weekday")
    try:
        CronSim(" ".join(fields), datetime.now(UTC))
    except CronSimError as exc:
        raise ValueError(f"bad cron expression: {exc}") from None
    return " ".join(fields)


@dataclass(frozen=True, slots=True)
class Timing:
    """``cron`` (with ``timezone``) or ``every_sec`` (from ``anchor``, unix ms)."""

    cron: str | None
    every_sec: int | None
    timezone: str
    anchor: int

    def next_after(self, t: int) -> int:
        """The first occurrence strictly after ``t``."""
        if self.every_sec is not None:
            period = self.every_sec * 1000
            if t < self.anchor:
                return self.anchor + period
            return self.anchor + ((t - self.anchor) // period + 1) * period
        assert self.cron is not None
        start = datetime.fromtimestamp(t / 1000, zone(self.timezone))
        return _ms(next(CronSim(self.cron, start)))

    def latest_at_or_before(self, t: int) -> int | None:
        """The last occurrence at or before ``t`` (None: none since the anchor)."""
        if self.every_sec is not None:
            period = self.every_sec * 1000
            if t < self.anchor + period:
                return None
            return self.anchor + ((t - self.anchor) // period) * period
        assert self.cron is not None
        start = datetime.fromtimestamp(t / 1000, zone(self.timezone)) + timedelta(seconds=1)
        found = _ms(next(CronSim(self.cron, start, reverse=True)))
        return found if found >= self.anchor else None


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
