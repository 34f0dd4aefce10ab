"""Mailboxes on their own: bounds, statistics, close vs terminate."""

from __future__ import annotations

import pytest
import trio

from runplane.runtime import ActorGone, MailboxClosed, MailboxFull
from runplane.runtime.mailbox import Envelope, Mailbox
from runplane.runtime.reply import Reply


async def test_bounds_and_statistics() -> None:
    mailbox = Mailbox("m", capacity=2)
    mailbox.put_nowait(Envelope("a"))
    await mailbox.put(Envelope("b"))
    with pytest.raises(MailboxFull):
        mailbox.put_nowait(Envelope("c"))
    stats = mailbox.statistics()
    assert (stats.depth, stats.capacity, stats.sent, stats.refused, stats.closed) == (
        2,
        2,
        2,
        1,
        False,
    )
    envelope = await mailbox.get()
    assert envelope is not None and envelope.msg == "a"
    assert mailbox.statistics().received == 1
    with pytest.raises(ValueError):
        Mailbox("bad", capacity=0)


async def test_close_lets_the_queue_drain() -> None:
    mailbox = Mailbox("m", capacity=4)
    await mailbox.put(Envelope(1))
    mailbox.close()
    with pytest.raises(MailboxClosed):
        await mailbox.put(Envelope(2))
    with pytest.raises(MailboxClosed):
        mailbox.put_nowait(Envelope(2))
    first = await mailbox.get()
    assert first is not None and first.msg == 1
    assert await mailbox.get() is None
    mailbox.reopen()
    await mailbox.put(Envelope(3))
    third = await mailbox.get()
    assert third is not None and third.msg == 3


async def test_terminate_fails_queued_asks_and_blocked_senders(
    autojump_clock: trio.abc.Clock,
) -> None:
    mailbox = Mailbox("m", capacity=1)
    reply = Reply()
    await mailbox.put(Envelope("ask", reply))
    blocked: list[BaseException] = []

    async def send() -> None:
        try:
            await mailbox.put(Envelope("tell"))
        except ActorGone as exc:
            blocked.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send)
        await trio.sleep(1)
        assert mailbox.statistics().waiting_senders == 1
        crash = RuntimeError("died")
        mailbox.terminate(cause=crash)
    assert len(blocked) == 1 and blocked[0].__cause__ is crash
    with pytest.raises(ActorGone) as caught:
        await reply.wait()
    assert caught.value.__cause__ is crash
    assert mailbox.statistics().dropped == 1
    assert mailbox.terminated.is_set()
    with pytest.raises(RuntimeError):
        mailbox.reopen()
