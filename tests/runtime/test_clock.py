"""The runtime's clock: trio time for timers, overridable wall time."""

from __future__ import annotations

import time

import pytest
import trio

from runplane.runtime import clock


async def test_now_is_the_trio_clock(autojump_clock: trio.abc.Clock) -> None:
    start = clock.now()
    await trio.sleep(3600)
    assert clock.now() - start == pytest.approx(3600)
    assert clock.now() == trio.current_time()


async def test_wall_can_be_pinned_or_driven(autojump_clock: trio.abc.Clock) -> None:
    with clock.override_wall(1_700_000_000.0):
        assert clock.wall() == 1_700_000_000.0
        with clock.override_wall(lambda: 1_700_000_000.0 + clock.now()):
            before = clock.wall()
            await trio.sleep(60)
            assert clock.wall() - before == pytest.approx(60)
        assert clock.wall() == 1_700_000_000.0
    assert abs(clock.wall() - time.time()) < 5


def test_set_wall_source_and_reset() -> None:
    try:
        clock.set_wall_source(lambda: 42.0)
        assert clock.wall() == 42.0
    finally:
        clock.set_wall_source(None)
    assert abs(clock.wall() - time.time()) < 5
