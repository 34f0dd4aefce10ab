"""Supervisors: restart types, intensity and escalation, orderly shutdown."""

from __future__ import annotations

import logging
from typing import Any

import pytest
import trio

from runplane.runtime import (
    Actor,
    ActorCrashed,
    ActorError,
    ActorRef,
    ChildSpec,
    Restart,
    Supervisor,
    SupervisorEscalated,
)

from .support import Add, Boom, Counter, Crash, Get, Stop, Wait, running


async def test_restart_rebuilds_state_with_the_factory(autojump_clock: trio.abc.Clock) -> None:
    store: dict[str, int] = {}
    built: list[Counter] = []

    def factory() -> Counter:
        built.append(Counter("job-1", store))
        return built[-1]

    async with running(Supervisor()) as sup:
        ref = await sup.start_child(ChildSpec("job-1", factory))
        await ref.ask(Add(3))
        built[0].count = 999  # state not in the store is lost with the crash
        with pytest.raises(ActorCrashed):
            await ref.ask(Crash())
        assert await ref.ask(Get()) == 3  # the same ref reaches the fresh instance
        assert len(built) == 2
        assert sup.child("job-1") == ref


async def test_async_factory(autojump_clock: trio.abc.Clock) -> None:
    async def load() -> Counter:
        await trio.sleep(1)  # e.g. a store read
        return Counter("x", {"x": 41})

    async with running(Supervisor()) as sup:
        ref = await sup.start_child(ChildSpec("x", load))
        assert await ref.ask(Add(1)) == 42


# (restart type, how the child ends, restarted?)
RESTART_TABLE = [
    (Restart.PERMANENT, "crash", True),
    (Restart.PERMANENT, "normal", True),
    (Restart.TRANSIENT, "crash", True),
    (Restart.TRANSIENT, "normal", False),
    (Restart.TEMPORARY, "crash", False),
    (Restart.TEMPORARY, "normal", False),
]


@pytest.mark.parametrize(("restart", "ending", "restarted"), RESTART_TABLE)
async def test_restart_types(
    autojump_clock: trio.abc.Clock, restart: Restart, ending: str, restarted: bool
) -> None:
    builds = 0

    def factory() -> Counter:
        nonlocal builds
        builds += 1
        return Counter()

    async with running(Supervisor()) as sup:
        ref = await sup.start_child(ChildSpec("c", factory, restart=restart))
        await ref.tell(Crash() if ending == "crash" else Stop())
        await trio.sleep(1)
        assert builds == (2 if restarted else 1)
        assert (sup.children() == ["c"]) is restarted
        assert ref.terminated is not restarted
        if restarted:
            assert await ref.ask(Get()) == 0
        assert sup.statistics().restarts == (1 if restarted else 0)


class CrashesOnStart(Actor[Any]):
    """Starts fine the first time, then a later incarnation crashes in on_start."""

    def __init__(self, log: list[str], first: bool) -> None:
        self.log = log
        self.first = first

    async def on_start(self) -> None:
        self.log.append("start")
        if not self.first:
            raise Boom("on_start")
        self.context.tell_after(1, Crash())

    async def handle(self, msg: Any) -> Any:
        raise Boom("handle")


async def test_escalation_past_the_intensity(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    log: list[str] = []
    sibling = Counter()
    sup = Supervisor(
        [
            ChildSpec("sibling", lambda: sibling),
            ChildSpec("flaky", lambda: CrashesOnStart(log, first=not log)),
        ],
        intensity=2,
        period=10,
        name="root",
    )
    with (
        caplog.at_level(logging.WARNING, logger="runplane.runtime"),
        pytest.raises(SupervisorEscalated) as caught,
    ):
        await sup.run()
    # crash in handle at t=1, then two restarts that crash in on_start, then give up
    assert log == ["start", "start", "start"]
    assert isinstance(caught.value.__cause__, Boom)
    assert caught.value.supervisor == "root"
    assert caught.value.child_id == "flaky"
    assert sibling.stopped  # the other children were stopped in order first
    assert trio.current_time() == pytest.approx(1)
    restarts = [r for r in caplog.records if getattr(r, "event", None) == "restart"]
    escalations = [r for r in caplog.records if getattr(r, "event", None) == "escalate"]
    assert len(restarts) == 2 and len(escalations) == 1
    assert restarts[0].supervisor == "root" and restarts[0].child_id == "flaky"  # type: ignore[attr-defined]
    assert escalations[0].levelno == logging.ERROR


class CrashEvery(Actor[Any]):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    async def on_start(self) -> None:
        self.context.tell_after(self.seconds, Crash())

    async def handle(self, msg: Any) -> Any:
        raise Boom("periodic")


async def test_crashes_spread_beyond_the_period_do_not_escalate(
    autojump_clock: trio.abc.Clock,
) -> None:
    sup = Supervisor([ChildSpec("c", lambda: CrashEvery(6))], intensity=1, period=5)
    async with running(sup):
        await trio.sleep(6 * 5 + 1)
        assert sup.statistics().restarts == 5
        assert sup.statistics().recent_restarts == 1
    # and the same child crashing twice within the period does escalate
    fast = Supervisor([ChildSpec("c", lambda: CrashEvery(2))], intensity=1, period=5)
    with pytest.raises(SupervisorEscalated):
        await fast.run()
    assert trio.current_time() == pytest.approx(31 + 4)


async def test_parent_sees_escalation_as_a_child_crash(autojump_clock: trio.abc.Clock) -> None:
    inner_runs = 0

    def make_inner() -> Supervisor:
        nonlocal inner_runs
        inner_runs += 1
        return Supervisor([ChildSpec("c", lambda: CrashEvery(1))], intensity=0, name="inner")

    parent = Supervisor(
        [ChildSpec("inner", make_inner, shutdown_timeout=30)],
        intensity=1,
        period=60,
        name="parent",
    )
    with pytest.raises(SupervisorEscalated) as caught:
        await parent.run()
    assert inner_runs == 2  # the parent restarted the inner supervisor once
    assert caught.value.supervisor == "parent"
    inner = caught.value.__cause__
    assert isinstance(inner, SupervisorEscalated) and inner.supervisor == "inner"
    assert isinstance(inner.__cause__, Boom)


async def test_nested_supervisor_handle_and_dynamic_children(
    autojump_clock: trio.abc.Clock,
) -> None:
    jobs = Supervisor(name="jobs")
    async with running(Supervisor([ChildSpec("jobs", lambda: jobs)])) as root:
        assert root.child("jobs") is jobs and jobs.running
        ref = await jobs.start_child(ChildSpec("job-1", Counter, restart=Restart.TRANSIENT))
        assert await ref.ask(Add(1)) == 1
    assert not jobs.running and ref.terminated


class SlowStop(Actor[Any]):
    def __init__(self, name: str, log: list[str], stop_takes: float) -> None:
        self.name = name
        self.log = log
        self.stop_takes = stop_takes

    async def handle(self, msg: Any) -> Any:
        return None

    async def on_stop(self) -> None:
        await trio.sleep(self.stop_takes)
        self.log.append(self.name)


async def test_orderly_shutdown_cancels_a_stuck_child(autojump_clock: trio.abc.Clock) -> None:
    log: list[str] = []
    sup = Supervisor(
        [
            ChildSpec("first", lambda: SlowStop("first", log, 1), shutdown_timeout=5),
            ChildSpec("stuck", lambda: SlowStop("stuck", log, 1000), shutdown_timeout=5),
            ChildSpec("last", lambda: SlowStop("last", log, 1), shutdown_timeout=5),
        ]
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        refs = {name: sup.child(name) for name in ("first", "stuck", "last")}
        t0 = trio.current_time()
        await sup.stop()
    # reverse start order: last (1s), stuck (cancelled at 5s), first (1s)
    assert log == ["last", "first"]
    assert trio.current_time() - t0 == pytest.approx(1 + 5 + 1)
    assert all(ref.terminated for ref in refs.values() if isinstance(ref, ActorRef))
    assert sup.children() == []


async def test_dynamic_children_errors(autojump_clock: trio.abc.Clock) -> None:
    def broken() -> Counter:
        raise KeyError("job-9 not in store")

    async with running(Supervisor()) as sup:
        await sup.start_child(ChildSpec("a", Counter))
        with pytest.raises(ValueError, match="already has a child"):
            await sup.start_child(ChildSpec("a", Counter))
        with pytest.raises(KeyError, match="job-9"):
            await sup.start_child(ChildSpec("b", broken))
        assert sup.children() == ["a"]
        assert sup.statistics().restarts == 0  # a failed start is not restarted
        with pytest.raises(KeyError):
            await sup.stop_child("nope")
        await sup.stop_child("a")
        assert sup.children() == []
    with pytest.raises(ActorError, match="not running"):
        await sup.start_child(ChildSpec("late", Counter))


async def test_dynamic_children_stop_together_on_shutdown(
    autojump_clock: trio.abc.Clock,
) -> None:
    log: list[str] = []
    async with running(Supervisor()) as sup:
        for i in range(50):
            await sup.start_child(ChildSpec(f"job-{i}", lambda i=i: SlowStop(f"job-{i}", log, 2)))
        t0 = trio.current_time()
    assert len(log) == 50
    assert trio.current_time() - t0 == pytest.approx(2)  # concurrently, not 50 x 2s


async def test_stop_child_waits_for_in_flight_work(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        actor = Counter()
        ref = await sup.start_child(ChildSpec("a", lambda: actor, shutdown_timeout=10))
        gate = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ref.ask, Wait(gate))
            await trio.sleep(1)
            nursery.start_soon(sup.stop_child, "a")
            await trio.sleep(3)
            assert not ref.terminated
            gate.set()
        assert actor.stopped and ref.terminated
        assert trio.current_time() == pytest.approx(4)


async def test_stop_while_a_child_is_being_built(autojump_clock: trio.abc.Clock) -> None:
    built: list[Counter] = []

    async def slow_load() -> Counter:
        await trio.sleep(5)
        built.append(Counter())
        return built[-1]

    sup = Supervisor()
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        nursery.start_soon(sup.start_child, ChildSpec("slow", slow_load, shutdown_timeout=60))
        await trio.sleep(1)
        await sup.stop()
    assert trio.current_time() == pytest.approx(5)  # stopped once built, not at the timeout
    assert built[0].stopped
