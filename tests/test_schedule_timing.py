"""When a schedule's occurrences fall (runplane/schedules/timing.py): intervals from the
anchor, cron in a time zone across both DST changes, and bad input."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from runplane.schedules.timing import Timing, check_cron, parse_every, zone

BERLIN = ZoneInfo("Europe/Berlin")


def ms(*args: int, tz: ZoneInfo = BERLIN) -> int:
    return int(datetime(*args, tzinfo=tz).timestamp() * 1000)  # type: ignore[misc]


def test_intervals_count_from_the_anchor() -> None:
    t = Timing(None, 2, "UTC", 1_000)
    assert [t.next_after(x) for x in (0, 1_000, 2_999, 3_000)] == [3_000, 3_000, 3_000, 5_000]
    assert [t.latest_at_or_before(x) for x in (2_999, 3_000, 10_500)] == [None, 3_000, 9_000]


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("5m", 300), ("1h30m", 5400), ("2d", 172800), ("1s", 1)]
)
def test_intervals_parse(text: str, seconds: int) -> None:
    assert parse_every(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "0s", "5", "1y", "367d", "-1m", "1m 2s"])
def test_bad_intervals_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="interval"):
        parse_every(text)


def test_cron_in_a_time_zone_across_daylight_saving_changes() -> None:
    daily = Timing("30 2 * * *", None, "Europe/Berlin", 0)
    # spring forward (2026-03-29: 02:00 -> 03:00): 02:30 does not exist; runs at 03:00
    assert daily.next_after(ms(2026, 3, 28, 12, 0)) == ms(2026, 3, 29, 3, 0)
    # autumn (2026-10-25: 03:00 -> 02:00): 02:30 happens twice; it runs once
    first = daily.next_after(ms(2026, 10, 24, 12, 0))
    assert datetime.fromtimestamp(first / 1000, BERLIN).hour == 2
    assert daily.next_after(first) == ms(2026, 10, 26, 2, 30)
    # the latest occurrence at or before a time
    assert daily.latest_at_or_before(ms(2026, 6, 1, 2, 30)) == ms(2026, 6, 1, 2, 30)
    assert daily.latest_at_or_before(ms(2026, 6, 1, 2, 29)) == ms(2026, 5, 31, 2, 30)


def test_bad_cron_and_zones_are_value_errors() -> None:
    assert check_cron(" */5  * * * * ") == "*/5 * * * *"
    for bad in ("* * * *", "61 * * * *", "* * * * * *", "@daily"):
        with pytest.raises(ValueError):
            check_cron(bad)
    with pytest.raises(ValueError, match="IANA"):
        zone("Mars/Base")
