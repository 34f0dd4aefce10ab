"""Bounded mailboxes on trio memory channels."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import trio

from .errors import ActorGone, MailboxClosed, MailboxFull
from .reply import Reply


@dataclass(frozen=True, slots=True)
class Envelope:
    """A message as queued: ``reply`` is set for an ask, ``None`` for a tell."""

    msg: Any
    reply: Reply | None = None


@dataclass(frozen=True, slots=True)
class MailboxStatistics:
    """A snapshot, like trio's ``MemoryChannelStatistics``."""

    depth: int  # messages queued now
    capacity: int  # the bound
    sent: int  # messages accepted
    received: int  # messages taken by the actor
    refused: int  # try_tell / try_ask calls refused because it was full
    dropped: int  # queued messages discarded when the actor ended for good
    waiting_senders: int  # tasks blocked in tell/ask (backpressure)
    closed: bool


class Mailbox:
    """A bounded queue of :class:`Envelope` with one consumer, the actor.

    It outlives restarts: the actor's replacement reads the same mailbox (as in
    Akka), so queued messages survive a crash; only the message being handled
    is lost. :meth:`close` refuses new messages and lets the actor drain the
    queue; :meth:`terminate` ends it for good and fails queued asks.
    """

    def __init__(self, name: str, capacity: int = 64) -> None:
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"mailbox capacity must be an int >= 1, got {capacity!r}")
        self.name = name
        self.capacity = capacity
        self._send, self._receive = trio.open_memory_channel[Envelope](capacity)
        self._closed: type[MailboxClosed] | type[ActorGone] | None = None
        self._cause: BaseException | None = None
        self.terminated = trio.Event()
        self._sent = 0
        self._received = 0
        self._refused = 0
        self._dropped = 0

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def _refusal(self) -> MailboxClosed | ActorGone:
        kind = self._closed or MailboxClosed
        if kind is MailboxClosed:
            error: MailboxClosed | ActorGone = MailboxClosed(f"actor {self.name!r} is stopped")
        else:
            error = ActorGone(f"actor {self.name!r} is gone")
        error.__cause__ = self._cause  # also hides the trio error it replaces
        return error

    async def put(self, envelope: Envelope) -> None:
        """Queue ``envelope``, waiting while the mailbox is full (backpressure)."""
        if self._closed is not None:
            await trio.lowlevel.checkpoint()
            raise self._refusal()
        try:
            await self._send.send(envelope)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise self._refusal()  # noqa: B904 (its __cause__ is the actor's crash)
        self._sent += 1

    def put_nowait(self, envelope: Envelope) -> None:
        """Queue ``envelope`` or raise :class:`MailboxFull` at once."""
        if self._closed is not None:
            raise self._refusal()
        try:
            self._send.send_nowait(envelope)
        except trio.WouldBlock:
            self._refused += 1
            raise MailboxFull(f"mailbox of {self.name!r} is full ({self.capacity})") from None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise self._refusal()  # noqa: B904 (its __cause__ is the actor's crash)
        self._sent += 1

    async def get(self) -> Envelope | None:
        """The next envelope; ``None`` once closed and drained."""
        try:
            envelope = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            return None
        self._received += 1
        return envelope

    def close(self, *, gone: bool = False, cause: BaseException | None = None) -> None:
        """Refuse new messages; queued ones stay for the actor to drain.

        Senders then get :class:`MailboxClosed`, or :class:`ActorGone` with
        ``gone=True`` (the actor died), blocked senders included.
        """
        if self._closed is None:
            self._closed = ActorGone if gone else MailboxClosed
            self._cause = cause
            self._send.close()

    def reopen(self) -> None:
        """Accept messages again after an orderly close (a permanent child that
        stopped itself is restarted on the same mailbox, so refs stay valid)."""
        if self.terminated.is_set():
            raise RuntimeError(f"mailbox of {self.name!r} is terminated")
        if self._closed is not None:
            self._receive.close()  # drained by the incarnation that ended
            self._send, self._receive = trio.open_memory_channel[Envelope](self.capacity)
            self._closed = None
            self._cause = None

    def terminate(self, cause: BaseException | None = None) -> None:
        """End for good: fail queued asks with :class:`ActorGone`, drop queued tells."""
        self.close(gone=cause is not None, cause=cause)
        while True:
            try:
                envelope = self._receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            self._dropped += 1
            if envelope.reply is not None:
                error = ActorGone(f"actor {self.name!r} ended before handling the request")
                error.__cause__ = cause
                envelope.reply.fail(error)
        self._receive.close()
        self.terminated.set()

    def statistics(self) -> MailboxStatistics:
        channel = self._send.statistics()
        return MailboxStatistics(
            depth=channel.current_buffer_used,
            capacity=self.capacity,
            sent=self._sent,
            received=self._received,
            refused=self._refused,
            dropped=self._dropped,
            waiting_senders=channel.tasks_waiting_send,
            closed=self.closed,
        )
