"""The agent's freeze watch (``runplane/agent/freeze.py``), under trio's clock: a gap in
its ticks longer than the limit is a freeze, whoever looks first after it."""

from __future__ import annotations

import trio
import trio.testing

from runplane.agent.freeze import FreezeWatch


async def _tick_for(watch: FreezeWatch, seconds: float) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch.tick_forever)
        await trio.sleep(seconds)
        nursery.cancel_scope.cancel()


async def test_a_gap_longer_than_the_limit_is_a_freeze(
    autojump_clock: trio.testing.MockClock,
) -> None:
    watch = FreezeWatch(limit=2.0)
    await _tick_for(watch, 1.0)
    seen = watch.look()
    await _tick_for(watch, 30.0)  # ticking every 0.5 s for 30 s: no freeze
    assert not watch.since(seen)
    autojump_clock.jump(1.5)  # a stall shorter than the limit
    assert not watch.since(seen)
    autojump_clock.jump(3.0)  # nothing ran for 4.5 s since the last tick: frozen
    assert watch.since(seen) and watch.generation == seen + 1
    assert watch.since(seen)  # for whoever held something from before, for good
    now = watch.look()
    assert not watch.since(now)  # counted once: what came after is fresh


async def test_the_limit_follows_the_heartbeat() -> None:
    watch = FreezeWatch()
    watch.set_heartbeat(5.0)
    assert watch.limit == 10.0  # 2 beats: the server waits 3 before it takes the node
    watch.set_heartbeat(0.1)
    assert watch.limit == 2.0  # never under 2 s: a busy loop is not a freeze
