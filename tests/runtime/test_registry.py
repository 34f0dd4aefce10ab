"""The registry: activation on demand, once; passivation when idle; re-activation."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from runplane.runtime import ActorCrashed, ActorKind, ActorRef, Registry, Restart, Supervisor

from .support import Add, Counter, CounterMsg, Crash, Get, Wait, running

COUNTER = ActorKind[CounterMsg]("counter")
JOB = ActorKind[CounterMsg]("job")


class Store:
    """An in-memory stand-in for the database the activation function loads from."""

    def __init__(self, rows: dict[str, int] | None = None, load_takes: float = 0.5) -> None:
        self.rows: dict[str, int] = rows if rows is not None else {}
        self.loads: list[str] = []
        self.load_takes = load_takes

    async def activate(self, id: str) -> Counter:
        await trio.sleep(self.load_takes)
        if id.startswith("missing"):
            raise KeyError(id)
        self.loads.append(id)
        return Counter(id, self.rows)


async def test_concurrent_gets_activate_once(autojump_clock: trio.abc.Clock) -> None:
    store = Store()
    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(COUNTER, store.activate)
        refs: list[ActorRef[Any]] = []

        async def get() -> None:
            refs.append(await registry.get(COUNTER, "c1"))

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(get)
        assert store.loads == ["c1"]
        assert len(refs) == 20 and all(ref == refs[0] for ref in refs)
        assert registry.statistics().activations == 1
        assert registry.statistics().active == 1
        assert await registry.get(COUNTER, "c2") != refs[0]
        assert store.loads == ["c1", "c2"]


async def test_passivation_after_idle_then_reactivation_keeps_state(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = Store()
    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(COUNTER, store.activate, idle_timeout=60)
        ref = await registry.get(COUNTER, "job-1")
        assert await ref.ask(Add(5)) == 5
        store.rows["job-1"] = -1  # only what on_stop saves must count from here on
        await trio.sleep(59)
        assert registry.active(COUNTER, "job-1")
        await trio.sleep(2)
        assert not registry.active(COUNTER, "job-1")
        assert ref.terminated
        assert store.rows["job-1"] == 5  # saved by on_stop when passivated
        assert sup.children() == []  # a row, not a task
        assert registry.statistics().active == 0
        assert registry.statistics().passivations == 1

        again = await registry.get(COUNTER, "job-1")
        assert again != ref
        assert await again.ask(Add(1)) == 6
        assert store.loads == ["job-1", "job-1"]
        assert registry.statistics().activations == 2


async def test_messages_keep_an_actor_active(autojump_clock: trio.abc.Clock) -> None:
    store = Store()
    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(COUNTER, store.activate, idle_timeout=10)
        ref = await registry.get(COUNTER, "busy")
        for _ in range(10):
            await trio.sleep(9)
            await ref.tell(Add(1))
        assert registry.active(COUNTER, "busy")
        assert store.loads == ["busy"]


async def test_get_during_passivation_waits_for_the_save(autojump_clock: trio.abc.Clock) -> None:
    class SlowSave(Counter):
        async def on_stop(self) -> None:
            await trio.sleep(3)
            await super().on_stop()

    rows: dict[str, int] = {}

    async def activate(id: str) -> Counter:
        return SlowSave(id, rows)

    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(COUNTER, activate, idle_timeout=10)
        ref = await registry.get(COUNTER, "j")
        await ref.tell(Add(7))
        rows["j"] = 0  # a stale row until the passivation saves
        await trio.sleep(11)  # idle at 10, saving until 13
        assert ref.closed and not ref.terminated
        again = await registry.get(COUNTER, "j")
        assert trio.current_time() == pytest.approx(13)
        assert await again.ask(Get()) == 7


async def test_registry_ask_rides_over_a_passivation(autojump_clock: trio.abc.Clock) -> None:
    store = Store()
    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(COUNTER, store.activate, idle_timeout=5)
        assert await registry.ask(COUNTER, "r", Add(1)) == 1
        await trio.sleep(10)
        await registry.tell(COUNTER, "r", Add(1))
        assert await registry.ask(COUNTER, "r", Get()) == 2
        assert registry.statistics().passivations == 1


async def test_crash_restarts_from_the_activation_function(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = Store()
    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(COUNTER, store.activate)
        ref = await registry.get(COUNTER, "k")
        await ref.ask(Add(2))
        with pytest.raises(ActorCrashed):
            await ref.ask(Crash())
        assert await ref.ask(Add(1)) == 3  # restarted, state reloaded from the store
        assert store.loads == ["k", "k"]
        assert await registry.get(COUNTER, "k") == ref


async def test_temporary_kind_crash_forgets_the_activation(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = Store()
    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(COUNTER, store.activate, restart=Restart.TEMPORARY)
        ref = await registry.get(COUNTER, "t")
        with pytest.raises(ActorCrashed):
            await ref.ask(Crash())
        await ref.wait_terminated()
        assert registry.statistics().crashes == 1
        assert await registry.get(COUNTER, "t") != ref


async def test_activation_errors_and_unknown_kinds(autojump_clock: trio.abc.Clock) -> None:
    store = Store()
    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(COUNTER, store.activate)
        with pytest.raises(LookupError, match="unknown actor kind"):
            await registry.get(ActorKind[CounterMsg]("nope"), "x")
        with pytest.raises(KeyError, match="missing-1"):
            await registry.get(COUNTER, "missing-1")
        assert registry.statistics().active == 0
        with pytest.raises(ValueError, match="already registered"):
            registry.register(COUNTER, store.activate)
        with pytest.raises(ValueError, match="PERMANENT"):
            registry.register(
                ActorKind[CounterMsg]("other"), store.activate, restart=Restart.PERMANENT
            )


async def test_can_passivate_false_keeps_the_actor(autojump_clock: trio.abc.Clock) -> None:
    class Running(Counter):
        def can_passivate(self) -> bool:
            return self.count >= 3  # e.g. only once the job is terminal

    rows: dict[str, int] = {}

    async def activate(id: str) -> Counter:
        return Running(id, rows)

    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(JOB, activate, idle_timeout=10)
        ref = await registry.get(JOB, "j")
        await ref.tell(Add(1))
        await trio.sleep(100)
        assert registry.active(JOB, "j")
        await ref.tell(Add(2))  # now "terminal"
        await trio.sleep(11)
        assert not registry.active(JOB, "j")
        assert rows["j"] == 3


async def test_explicit_passivate(autojump_clock: trio.abc.Clock) -> None:
    store = Store()
    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(COUNTER, store.activate, idle_timeout=None)
        ref = await registry.get(COUNTER, "p")
        await ref.tell(Add(4))
        await registry.passivate(COUNTER, "p")
        assert ref.terminated and store.rows["p"] == 4
        await registry.passivate(COUNTER, "p")  # no-op when not active
        assert registry.statistics().passivations == 1


async def test_tell_active_never_waits_nor_activates(autojump_clock: trio.abc.Clock) -> None:
    store = Store()
    async with running(Supervisor()) as sup:
        registry = Registry(sup)
        registry.register(COUNTER, store.activate, mailbox_capacity=2)
        assert registry.tell_active(COUNTER, "c1", Add(1)) is False  # not active: not activated
        assert store.loads == []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(registry.get, COUNTER, "c1")
            await trio.sleep(store.load_takes / 2)  # activating: no ref to send to yet
            assert registry.tell_active(COUNTER, "c1", Add(1)) is False
        ref = await registry.get(COUNTER, "c1")
        gate = trio.Event()
        await ref.tell(Wait(gate))  # the actor holds this one: its mailbox fills behind it
        await trio.testing.wait_all_tasks_blocked()
        sent = [registry.tell_active(COUNTER, "c1", Add(1)) for _ in range(4)]
        assert sent == [True, True, False, False]  # full: refused at once, nothing waits
        gate.set()
        assert await ref.ask(Get()) == 2
        await registry.passivate(COUNTER, "c1")
        assert registry.tell_active(COUNTER, "c1", Add(1)) is False
