"""runtime/tick.py: one timer for many waiters; nobody waits longer than it asked, and a
cancelled sleeper never leaves the others parked."""

from __future__ import annotations

import trio
import trio.testing

from runplane.runtime.tick import SharedTick


async def test_waiters_share_the_first_ones_sleep(autojump_clock: trio.testing.MockClock) -> None:
    tick = SharedTick()
    woke: dict[int, float] = {}
    start = trio.current_time()

    async def waiter(n: int, after: float) -> None:
        await trio.sleep(after)
        await tick.wait(1.0)
        woke[n] = trio.current_time() - start

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter, 0, 0.0)  # sleeps: the others park on its timer
        for n in range(1, 50):
            nursery.start_soon(waiter, n, 0.5)
        await trio.sleep(0.6)
        assert tick.waiting == 49
    # all at the first one's 1.0 s: the late ones waited 0.5 s, never more than asked
    assert set(woke.values()) == {1.0}, woke
    assert tick.waiting == 0
    # the next wait after it sleeps its own full delay
    before = trio.current_time()
    await tick.wait(0.25)
    assert trio.current_time() - before == 0.25


async def test_a_cancelled_sleeper_wakes_the_parked(autojump_clock: trio.testing.MockClock) -> None:
    tick = SharedTick()
    woke: list[float] = []

    async def parked() -> None:
        await tick.wait(10.0)
        woke.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        with trio.CancelScope() as sleeper:
            sleeper.deadline = trio.current_time() + 2.0  # its client went away at 2 s
            nursery.start_soon(parked)  # (parks: the sleeper below is first)
            await tick.wait(10.0)
        assert sleeper.cancelled_caught
    assert woke and woke[0] <= 2.0 + 1e-9, woke
