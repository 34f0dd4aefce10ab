"""The webhook dispatcher against a real receiver over loopback, on each store backend.

Time is trio's ``MockClock`` at rate 0: nothing waits in real time for a retry; the test
jumps the clock past a due time and the dispatcher attempts again. Receivers answer from
a script (``tests/webhook_receiver.py``) and verify both signatures.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

from runplane import egress
from runplane.actors.webhooks import DispatchDeps, DispatchMsg, Poke, WebhookDispatcher, payload
from runplane.persistence import Store, open_store
from runplane.runtime import ActorRef, ChildSpec, Supervisor
from runplane.sealing import Sealer
from runplane.webhooks import deliveries, endpoints
from runplane.webhooks.deliveries import Delivery
from tests.webhook_receiver import Receiver

SEALER = Sealer(b"webhook-dispatch-test-key-material-0123456789")
LOOPBACK = egress.Allow.of(["127.0.0.1"])
RUN = {"id": "job_1", "org_id": "org_a", "phase": "succeeded", "metrics": {"loss": 0.5}}


@pytest.fixture
async def durable_store(durable_store_url: str | None, data_dir: Path) -> AsyncIterator[Store]:
    s = open_store(durable_store_url, data_dir)
    await s.open()
    try:
        yield s
    finally:
        await s.close()


async def make_endpoint(
    store: Store, url: str, *, org: str = "org_a", events: tuple[str, ...] = endpoints.EVENTS
) -> tuple[endpoints.Endpoint, str]:
    endpoint, secret = endpoints.new_endpoint(
        SEALER, org_id=org, url=url, events=events, created_by="test"
    )
    await endpoints.insert(store, endpoint)
    return endpoint, secret


async def fire(store: Store, job_id: str, event: str = "run.succeeded", org: str = "org_a") -> int:
    return await store.transaction(deliveries.fire(org, job_id, event, {**RUN, "id": job_id}))


@asynccontextmanager
async def dispatcher(
    store: Store, allow: egress.Allow = LOOPBACK, **kw: Any
) -> AsyncIterator[ActorRef[DispatchMsg]]:
    sup = Supervisor(name="test")
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        try:
            deps = DispatchDeps(store, lambda: SEALER, allow, **kw)
            yield await sup.start_child(ChildSpec("webhooks", lambda: WebhookDispatcher(deps)))
        finally:
            with trio.CancelScope(shield=True):
                await sup.stop()


async def until(check: Callable[[], Any], what: str) -> Any:
    """Poll ``check`` (async) in real time: the mock clock does not move by itself."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        found = await check()
        if found:
            return found
        await trio.lowlevel.checkpoint()
        await trio.to_thread.run_sync(time.sleep, 0.002)  # real time passes, the loop runs
    raise AssertionError(f"timed out waiting for {what}")


async def jump(clock: trio.testing.MockClock, seconds: float) -> None:
    """Move the clock once the dispatcher has finished reacting to what happened (its
    store writes and messages): a timer it sets after the jump would start from the later
    time and a test waiting for it would wait forever."""
    await settle()
    await trio.testing.wait_all_tasks_blocked()
    clock.jump(seconds)


async def rows(store: Store, endpoint_id: str) -> list[Delivery]:
    return await deliveries.recent(store, endpoint_id)


async def settle() -> None:
    """Let real I/O that could happen happen (a wrong attempt would arrive by now)."""
    for _ in range(20):
        await trio.lowlevel.checkpoint()
        await trio.to_thread.run_sync(time.sleep, 0.005)


async def test_two_failures_then_success_delivers_on_the_third_attempt(
    store: Store, mock_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        receiver = await Receiver.start(nursery, [500, 503])
        endpoint, secret = await make_endpoint(store, receiver.url())
        assert await fire(store, "job_1") == 1
        async with dispatcher(store) as ref:
            await ref.tell(Poke())
            await jump(mock_clock, 0.02)  # the coalescing delay of a poke
            await receiver.wait_for(1)

            async def attempts(n: int) -> Callable[[], Any]:
                async def check() -> Delivery | None:
                    (row,) = await rows(store, endpoint.id)
                    return row if row.attempts == n else None

                return check

            first = await until(await attempts(1), "the first attempt's record")
            assert (first.status, first.response_code, first.error) == (
                "pending",
                500,
                "HTTP 500: ok",
            )
            await jump(mock_clock, 4.4)  # the 5 s retry, -10 % jitter at most: not due yet
            await settle()
            assert len(receiver.received) == 1
            await jump(mock_clock, 1.2)
            await receiver.wait_for(2)
            second = await until(await attempts(2), "the second attempt's record")
            assert (second.status, second.response_code) == ("pending", 503)
            await jump(mock_clock, 331)  # 5 min + 10 %
            await receiver.wait_for(3)
            done = await until(await attempts(3), "the third attempt's record")
            assert (done.status, done.response_code, done.error) == ("delivered", 200, "")
            assert done.next_at is None
        nursery.cancel_scope.cancel()
    got = receiver.received
    assert len(got) == 3
    assert {r.headers["x-runplane-delivery"] for r in got} == {done.id}  # stable id
    assert all(r.body == got[0].body for r in got)  # the same bytes every time
    assert all(r.verified(secret, time.time()) for r in got)
    assert got[0].headers["x-runplane-event"] == "run.succeeded"
    assert got[0].body == payload(done)


async def test_a_4xx_is_not_retried_and_retry_after_is_honoured(
    store: Store, mock_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        refusing = await Receiver.start(nursery, [404])
        busy = await Receiver.start(nursery, [(429, [("Retry-After", "60")])])
        gone, _ = await make_endpoint(store, refusing.url())
        slow, _ = await make_endpoint(store, busy.url())
        assert await fire(store, "job_1") == 2
        async with dispatcher(store) as ref:
            await ref.tell(Poke())
            await jump(mock_clock, 0.02)

            async def over() -> bool:
                return [r.status for r in await rows(store, gone.id)] == ["failed"]

            await until(over, "the 404 to fail the delivery")
            (failed,) = await rows(store, gone.id)
            assert (failed.attempts, failed.response_code) == (1, 404)
            await busy.wait_for(1)

            async def throttled() -> bool:
                return [r.response_code for r in await rows(store, slow.id)] == [429]

            await until(throttled, "the 429 to be recorded")
            await jump(mock_clock, 6)  # past the 5 s schedule: Retry-After (60 s) wins
            await settle()
            assert len(busy.received) == 1
            await jump(mock_clock, 55)
            await busy.wait_for(2)

            async def delivered() -> bool:
                return [r.status for r in await rows(store, slow.id)] == ["delivered"]

            await until(delivered, "the retry after Retry-After")
            await jump(mock_clock, 3600)
            await settle()
        nursery.cancel_scope.cancel()
    assert len(refusing.received) == 1  # never again


async def test_a_receiver_that_hangs_delays_only_its_own_deliveries(
    store: Store, mock_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        hanging = await Receiver.start(nursery, ["hang"] * 6)
        quick = await Receiver.start(nursery)
        stuck, _ = await make_endpoint(store, hanging.url(), org="org_a")
        fine, _ = await make_endpoint(store, quick.url(), org="org_b")
        for n in range(6):
            await fire(store, f"job_a{n}", org="org_a")
        await fire(store, "job_b", org="org_b")
        async with dispatcher(store, per_endpoint=4) as ref:
            await ref.tell(Poke())
            await jump(mock_clock, 0.02)
            await hanging.wait_for(4)  # its limit: the 2 others wait their turn
            await quick.wait_for(1)  # not behind them

            async def fine_done() -> bool:
                return [r.status for r in await rows(store, fine.id)] == ["delivered"]

            await until(fine_done, "the other endpoint's delivery")
            await settle()
            assert len(hanging.received) == 4
            await jump(mock_clock, 15.5)  # the attempts time out; the 2 waiting ones go

            async def timed_out() -> list[Delivery]:
                found = [r for r in await rows(store, stuck.id) if r.attempts == 1]
                return found if len(found) >= 4 else []

            late = await until(timed_out, "the hanging attempts to time out")
            assert all(r.error == "no answer within 15 s" for r in late)
            assert all(r.status == "pending" for r in late)
            await hanging.wait_for(6)
        nursery.cancel_scope.cancel()


async def test_an_internal_address_is_refused_at_delivery_unless_allowed(
    store: Store, mock_clock: trio.testing.MockClock
) -> None:
    async with trio.open_nursery() as nursery:
        receiver = await Receiver.start(nursery)
        # "localhost" resolves to 127.0.0.1: refused without an allow entry
        endpoint, _ = await make_endpoint(store, receiver.url(host="localhost"))
        await fire(store, "job_1")
        async with dispatcher(store, allow=egress.Allow.of([])) as ref:
            await ref.tell(Poke())
            await jump(mock_clock, 0.02)

            async def refused() -> list[Delivery]:
                return [r for r in await rows(store, endpoint.id) if r.status == "failed"]

            (row,) = await until(refused, "the refusal")
            assert row.error.startswith("not sent: ")
            assert "127.0.0.1" in row.error and "loopback" in row.error
            assert "RUNPLANE_EGRESS_ALLOW" in row.error
            assert row.attempts == 1 and row.response_code == 0
        assert receiver.received == []
        # allowed by name: delivered
        await fire(store, "job_2")
        async with dispatcher(store, allow=egress.Allow.of(["localhost"])) as ref:
            await ref.tell(Poke())
            await jump(mock_clock, 0.02)
            await receiver.wait_for(1)
        nursery.cancel_scope.cancel()


async def test_a_restart_attempts_what_is_pending_and_not_what_was_delivered(
    durable_store: Store, mock_clock: trio.testing.MockClock
) -> None:
    store = durable_store
    async with trio.open_nursery() as nursery:
        receiver = await Receiver.start(nursery, [200, 500])
        endpoint, _ = await make_endpoint(store, receiver.url())
        await fire(store, "job_1")
        async with dispatcher(store) as ref:
            await ref.tell(Poke())
            await jump(mock_clock, 0.02)
            await receiver.wait_for(1)

            async def one_delivered() -> bool:
                return [r.status for r in await rows(store, endpoint.id)] == ["delivered"]

            await until(one_delivered, "the first delivery")
            await fire(store, "job_2")
            await ref.tell(Poke())
            await jump(mock_clock, 0.02)
            await receiver.wait_for(2)

            async def retry_due() -> bool:
                return [r.attempts for r in await rows(store, endpoint.id)] == [1, 1]

            await until(retry_due, "the failed attempt's record")
        # a new dispatcher (the server restarted): only job_2's delivery, when due
        async with dispatcher(store):
            await settle()
            assert len(receiver.received) == 2
            await jump(mock_clock, 6)
            await receiver.wait_for(3)

            async def both() -> bool:
                return [r.status for r in await rows(store, endpoint.id)] == ["delivered"] * 2

            await until(both, "the pending delivery after the restart")
            await settle()
        nursery.cancel_scope.cancel()
    assert [r.body for r in receiver.received].count(receiver.received[0].body) == 1
    assert len(receiver.received) == 3
