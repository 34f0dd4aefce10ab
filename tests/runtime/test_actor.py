"""Actors, refs and mailboxes: tell, ask, crashes, timeouts, backpressure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import trio

from runplane.runtime import (
    Actor,
    ActorCrashed,
    ActorGone,
    ActorRef,
    AskTimeout,
    ChildSpec,
    MailboxClosed,
    MailboxFull,
    Reply,
    Restart,
    Supervisor,
)

from .support import Add, Boom, Counter, Crash, Get, Sleep, Stop, Wait, running


async def start(sup: Supervisor, actor: Actor[Any], **spec: Any) -> ActorRef[Any]:
    spec.setdefault("restart", Restart.TEMPORARY)
    return await sup.start_child(ChildSpec(spec.pop("id", "a"), lambda: actor, **spec))


async def test_tell_then_ask_in_order(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        ref = await start(sup, Counter())
        await ref.tell(Add(2))
        ref.try_tell(Add(3))
        assert await ref.ask(Get()) == 5
        stats = ref.statistics()
        assert (stats.sent, stats.received, stats.depth) == (3, 3, 0)


async def test_ask_timeout_then_late_reply_is_dropped(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        actor = Counter()
        ref = await start(sup, actor)
        t0 = trio.current_time()
        with pytest.raises(AskTimeout):
            await ref.ask(Sleep(10), timeout=1)
        assert trio.current_time() - t0 == pytest.approx(1)
        # the actor finishes the abandoned request without harm and carries on
        assert await ref.ask(Add(1), timeout=None) == 1
        assert trio.current_time() - t0 == pytest.approx(10)
        assert actor.handled == [Sleep(10), Add(1)]


async def test_ask_timeout_counts_time_waiting_for_room(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        gate = trio.Event()
        ref = await start(sup, Counter(), mailbox_capacity=1)
        await ref.tell(Wait(gate))
        await trio.sleep(0.1)  # the actor holds Wait; the mailbox is empty
        await ref.tell(Add(1))  # now full
        t0 = trio.current_time()
        with pytest.raises(AskTimeout):
            await ref.ask(Get(), timeout=2)
        assert trio.current_time() - t0 == pytest.approx(2)
        gate.set()


async def test_ask_to_actor_crashing_while_handling(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        ref = await start(sup, Counter())
        t0 = trio.current_time()
        with pytest.raises(ActorCrashed) as caught:
            await ref.ask(Crash("bad input"))
        assert isinstance(caught.value.__cause__, Boom)
        assert str(caught.value.__cause__) == "bad input"
        assert isinstance(caught.value, ActorGone)  # catchable as "no answer"
        assert trio.current_time() == t0  # promptly, not at the timeout
        await ref.wait_terminated()  # temporary: not restarted
        with pytest.raises(ActorGone):
            await ref.tell(Add(1))


async def test_queued_ask_fails_when_actor_dies(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        gate = trio.Event()
        ref = await start(sup, Counter())
        results: dict[str, Any] = {}

        async def ask(label: str, msg: Any) -> None:
            try:
                results[label] = await ref.ask(msg, timeout=60)
            except Exception as exc:
                results[label] = exc

        async with trio.open_nursery() as nursery:
            await ref.tell(Wait(gate))
            await ref.tell(Crash())
            nursery.start_soon(ask, "queued", Get())
            await trio.sleep(1)
            assert ref.statistics().depth == 2  # Crash and the ask wait behind Wait
            gate.set()
        assert isinstance(results["queued"], ActorGone)
        assert isinstance(results["queued"].__cause__, Boom)
        assert trio.current_time() == pytest.approx(1)
        assert ref.statistics().dropped == 1


async def test_queued_asks_survive_a_restart(autojump_clock: trio.abc.Clock) -> None:
    store: dict[str, int] = {}
    async with running(Supervisor()) as sup:
        ref = await sup.start_child(ChildSpec("c", lambda: Counter("c", store)))
        await ref.ask(Add(5))
        async with trio.open_nursery() as nursery:
            crashed = trio.Event()

            async def crash() -> None:
                with pytest.raises(ActorCrashed):
                    await ref.ask(Crash())
                crashed.set()

            nursery.start_soon(crash)
            await trio.lowlevel.checkpoint()  # Crash is queued first
            # queued behind the crash: answered by the fresh incarnation
            assert await ref.ask(Add(1)) == 6  # 5 reloaded from the store, + 1
        assert crashed.is_set()
        assert sup.statistics().restarts == 1


async def test_stop_with_requests_queued_and_in_hand(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        actor = Counter()
        ref = await start(sup, actor, shutdown_timeout=3)
        outcomes: list[BaseException] = []

        async def ask(msg: Any) -> None:
            try:
                await ref.ask(msg, timeout=60)
            except ActorGone as exc:
                outcomes.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, Wait(trio.Event()))  # never released: stuck
            await trio.sleep(0.1)
            nursery.start_soon(ask, Get())  # queued
            await trio.sleep(0.1)
            t0 = trio.current_time()
            await sup.stop_child("a")
            assert trio.current_time() - t0 == pytest.approx(3)
        assert len(outcomes) == 2
        assert not isinstance(outcomes[0], ActorCrashed)
        assert not actor.stopped  # cancelled: on_stop is for orderly ends only
        with pytest.raises(MailboxClosed):
            await ref.tell(Get())


async def test_backpressure_on_a_full_mailbox(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        gate = trio.Event()
        actor = Counter()
        ref = await start(sup, actor, mailbox_capacity=2)
        await ref.tell(Wait(gate))
        await trio.sleep(0.1)  # the actor is now stuck on the gate
        await ref.tell(Add(1))
        await ref.tell(Add(1))
        stats = ref.statistics()
        assert (stats.depth, stats.capacity, stats.waiting_senders) == (2, 2, 0)

        with trio.move_on_after(5) as blocked:
            await ref.tell(Add(1))
        assert blocked.cancelled_caught  # tell waited: backpressure

        with pytest.raises(MailboxFull):
            ref.try_tell(Add(1))
        with pytest.raises(MailboxFull):
            await ref.try_ask(Get())
        assert ref.statistics().refused == 2

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ref.tell, Add(10))
            await trio.sleep(1)
            assert ref.statistics().waiting_senders == 1
            gate.set()
        assert await ref.ask(Get()) == 12
        assert ref.statistics().sent == 5  # Wait, 2 x Add(1), Add(10), Get


async def test_tell_now_queues_without_yielding_and_waits_only_when_full(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running(Supervisor()) as sup:
        gate = trio.Event()
        actor = Counter()
        ref = await start(sup, actor, mailbox_capacity=2)
        await ref.tell(Wait(gate))
        await trio.sleep(0.1)  # the actor is now stuck on the gate
        ran: list[str] = []

        async def other() -> None:
            ran.append("other")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(other)
            await ref.tell_now(Add(1))  # room: queued, and no other task ran meanwhile
            assert ran == []
            await ref.tell_now(Add(1))
            assert ref.statistics().depth == 2
        with trio.move_on_after(5) as blocked:
            await ref.tell_now(Add(1))  # full: it waits (backpressure), like tell
        assert blocked.cancelled_caught
        gate.set()
        assert await ref.ask(Get()) == 2


async def test_orderly_stop_drains_then_on_stop(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        actor = Counter()
        ref = await start(sup, actor)
        gate = trio.Event()
        await ref.tell(Wait(gate))
        await trio.lowlevel.checkpoint()
        for _ in range(3):
            await ref.tell(Add(1))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sup.stop_child, "a")
            await trio.sleep(0.1)
            with pytest.raises(MailboxClosed):
                await ref.tell(Add(100))
            gate.set()
        assert actor.count == 3 and actor.stopped
        assert ref.terminated


async def test_self_stop_from_handle(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        actor = Counter()
        ref = await start(sup, actor)
        assert await ref.ask(Stop()) == "stopping"
        await ref.wait_terminated()
        assert actor.stopped
        assert sup.children() == []


@dataclass(frozen=True, slots=True)
class Tick:
    n: int


class Ticker(Actor[Tick | Get]):
    def __init__(self) -> None:
        self.ticks: list[tuple[int, float]] = []

    async def on_start(self) -> None:
        self.context.tell_after(5, Tick(1))
        cancelled = self.context.tell_after(7, Tick(2))
        cancelled.cancel()

    async def handle(self, msg: Tick | Get) -> Any:
        if isinstance(msg, Tick):
            self.ticks.append((msg.n, trio.current_time()))
        return self.ticks


async def test_timer_message_to_self(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        actor = Ticker()
        ref = await start(sup, actor)
        t0 = trio.current_time()
        await trio.sleep(10)
        assert await ref.ask(Get()) == [(1, pytest.approx(t0 + 5))]


class HelperCrashes(Actor[Get]):
    async def on_start(self) -> None:
        async def helper() -> None:
            await trio.sleep(1)
            raise Boom("helper")

        self.context.start_soon(helper)

    async def handle(self, msg: Get) -> Any:
        await trio.sleep(60)


async def test_helper_task_crash_crashes_the_actor(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        ref = await sup.start_child(ChildSpec("h", HelperCrashes, restart=Restart.TEMPORARY))
        with pytest.raises(ActorCrashed) as caught:
            await ref.ask(Get(), timeout=60)
        assert isinstance(caught.value.__cause__, Boom)
        assert trio.current_time() == pytest.approx(1)


async def test_reply_slot_is_one_shot_and_safe_after_abandon() -> None:
    reply = Reply()
    reply.abandon()
    assert reply.send(1) is False
    assert not reply.done
    answered = Reply()
    assert answered.send("yes") is True
    assert answered.fail(RuntimeError()) is False
    answered.abandon()  # too late to abandon: the answer stands
    assert await answered.wait() == "yes"


async def test_refs_compare_by_actor(autojump_clock: trio.abc.Clock) -> None:
    async with running(Supervisor()) as sup:
        ref = await start(sup, Counter())
        assert ref == sup.child("a")
        assert hash(ref) == hash(sup.child("a"))
        assert ref != await start(sup, Counter(), id="b")
        assert repr(ref) == "ActorRef('a')"
