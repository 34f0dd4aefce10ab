"""A child that keeps crashing on something outside it (the store unreachable: its
``on_start`` reload fails) backs off instead of spinning, logs "child restarted" once per
interval (with the count since the last line) instead of once per restart, keeps its
mailbox (the same ref), and comes back with its state reloaded once the outage ends
(issue 41 item 1). Neither the registry's supervisor nor the root escalates meanwhile."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from runplane.runtime import Actor, ActorCrashed, ChildSpec, Supervisor
from runplane.runtime.supervisor import (
    RESTART_AT_ONCE,
    RESTART_BACKOFF_MAX,
    RESTART_LOG_INTERVAL,
    restart_delay,
)

from .support import Boom, running


class Outage:
    """The world outside the actor: ``down`` makes every load fail."""

    def __init__(self) -> None:
        self.down = False
        self.loads = 0
        self.value = 7


class Reloads(Actor[str]):
    """Loads its state on start (as the job actors load their row), answers it."""

    def __init__(self, outage: Outage) -> None:
        self.outage = outage
        self.value = 0

    async def on_start(self) -> None:
        self.outage.loads += 1
        if self.outage.down:
            raise Boom("the store cannot be reached")
        self.value = self.outage.value

    async def handle(self, msg: str) -> Any:
        if msg == "crash":
            raise Boom("a write failed: the store cannot be reached")
        return self.value


def test_the_delay_doubles_after_the_first_restarts_up_to_its_cap() -> None:
    delays = [restart_delay(n) for n in range(1, 12)]
    assert delays[:RESTART_AT_ONCE] == [0.0] * RESTART_AT_ONCE
    assert delays[RESTART_AT_ONCE : RESTART_AT_ONCE + 3] == [0.1, 0.2, 0.4]
    assert delays[-1] == RESTART_BACKOFF_MAX and max(delays) == RESTART_BACKOFF_MAX


# the registry's supervisor, and the root's (runplane/system.py)
@pytest.mark.parametrize(("intensity", "period"), [(1000, 1.0), (5, 10.0)])
async def test_a_child_failing_through_an_outage_backs_off_and_resumes(
    autojump_clock: trio.abc.Clock,
    caplog: pytest.LogCaptureFixture,
    intensity: int,
    period: float,
) -> None:
    """Restarts after a backoff do not count toward the intensity: neither supervisor
    escalates however long the outage lasts (without the backoff the registry's spins
    1,000 restarts at one instant and both escalate)."""
    outage = Outage()
    actors = Supervisor(intensity=intensity, period=period, name="actors")
    minutes = 2
    with caplog.at_level(logging.WARNING, logger="runplane.runtime"):
        async with running(actors) as sup:
            ref = await sup.start_child(ChildSpec("job-1", lambda: Reloads(outage)))
            assert await ref.ask("get") == 7
            outage.down = True
            began = trio.current_time()
            with pytest.raises(ActorCrashed):
                await ref.ask("crash")
            await trio.sleep(minutes * 60)
            restarts = outage.loads - 1
            assert 10 < restarts < minutes * 60 / RESTART_BACKOFF_MAX + 15, restarts
            lines = [r for r in caplog.records if r.getMessage() == "child restarted"]
            assert (
                RESTART_AT_ONCE
                <= len(lines)
                <= RESTART_AT_ONCE + minutes * 60 / (RESTART_LOG_INTERVAL - RESTART_BACKOFF_MAX)
            )
            counted = sum(getattr(r, "restarts_since_last_line", 0) for r in lines)
            # (the last line may be of a restart still waiting out its delay)
            assert counted <= restarts + 1 and lines[-1].backoff_sec == RESTART_BACKOFF_MAX  # type: ignore[attr-defined]

            outage.down, outage.value = False, 8  # the store is back, with newer state
            answer = await ref.ask("get", timeout=RESTART_BACKOFF_MAX + 1)
            assert answer == 8  # the same ref, a fresh instance reloaded from the store
            assert trio.current_time() - began < minutes * 60 + RESTART_BACKOFF_MAX + 1
            assert sup.running and sup.statistics().restarts == outage.loads - 1


async def test_stopping_a_child_in_its_backoff_does_not_wait_it_out(
    autojump_clock: trio.abc.Clock,
) -> None:
    outage = Outage()
    async with running(Supervisor(intensity=1000, period=1.0)) as sup:
        ref = await sup.start_child(ChildSpec("job-1", lambda: Reloads(outage)))
        outage.down = True
        with pytest.raises(ActorCrashed):
            await ref.ask("crash")
        await trio.sleep(30)  # deep in its backoff now
        stopped_at = trio.current_time()
        await sup.stop_child("job-1")
        assert trio.current_time() - stopped_at < 1
