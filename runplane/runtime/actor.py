"""Actors, the refs that address them, and the loop that runs one incarnation."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any, Generic, TypeVar, overload

import trio

from . import clock
from .errors import ActorCrashed, ActorGone, AskTimeout, MailboxClosed, MailboxFull
from .mailbox import Envelope, Mailbox, MailboxStatistics
from .reply import Reply

M = TypeVar("M")
R = TypeVar("R")


class Asks(Generic[R]):
    """Base of a request message whose answer is an ``R``: ``await ref.ask(msg)`` is then
    typed ``R`` (``class Cancel(Asks[CancelOutcome])``). Messages that are only told, or
    asked without a typed answer, need no base."""

    __slots__ = ()


DEFAULT_ASK_TIMEOUT = 5.0
"""Seconds an ``ask`` waits by default (OTP's ``gen_server:call`` default)."""


class ActorRef(Generic[M]):
    """The only handle callers hold on an actor: send messages, ask questions.

    A ref addresses the actor's mailbox, which survives restarts, so a ref
    stays valid across crashes until the actor stops for good.
    """

    __slots__ = ("_mailbox",)

    def __init__(self, mailbox: Mailbox) -> None:
        self._mailbox = mailbox

    @property
    def name(self) -> str:
        return self._mailbox.name

    @property
    def closed(self) -> bool:
        """The actor accepts no more messages (stopping, passivating or gone)."""
        return self._mailbox.closed

    @property
    def terminated(self) -> bool:
        """The actor is finished: no incarnation will run again."""
        return self._mailbox.terminated.is_set()

    async def wait_terminated(self) -> None:
        """Wait until the actor is finished for good (like an OTP monitor)."""
        await self._mailbox.terminated.wait()

    async def tell(self, msg: M) -> None:
        """Fire and forget; waits while the mailbox is full (backpressure).

        Raises :class:`MailboxClosed` (stopped) or :class:`ActorGone` (died).
        """
        await self._mailbox.put(Envelope(msg))

    def try_tell(self, msg: M) -> None:
        """Fire and forget without waiting: raises :class:`MailboxFull` when full."""
        self._mailbox.put_nowait(Envelope(msg))

    async def tell_now(self, msg: M) -> None:
        """Like :meth:`tell`, but without a scheduling point when the mailbox has room (the
        message is queued and the caller runs on); waits only while it is full. For actors
        that send on their hot path: a yield there lets every other ready task run first."""
        try:
            self._mailbox.put_nowait(Envelope(msg))
        except MailboxFull:
            await self._mailbox.put(Envelope(msg))

    @overload
    async def ask(self, msg: Asks[R], *, timeout: float | None = ...) -> R: ...  # noqa: ASYNC109

    @overload
    async def ask(self, msg: M, *, timeout: float | None = ...) -> Any: ...  # noqa: ASYNC109

    async def ask(
        self,
        msg: Any,
        *,
        # ASYNC109: the timeout is part of the request (OTP's call/3); its expiry is an
        # AskTimeout that also abandons the reply slot, not a bare Cancelled.
        timeout: float | None = DEFAULT_ASK_TIMEOUT,  # noqa: ASYNC109
    ) -> Any:
        """Send ``msg`` and return the value ``handle`` returned for it.

        ``timeout`` (seconds, ``None`` = no limit) covers waiting for room in
        the mailbox and for the answer; past it :class:`AskTimeout` is raised.
        :class:`ActorCrashed` if the actor raised handling it, :class:`ActorGone`
        if it ended with the request queued or in hand.
        """
        return await self._ask(msg, timeout, wait_for_room=True)

    @overload
    async def try_ask(
        self,
        msg: Asks[R],
        *,
        timeout: float | None = ...,  # noqa: ASYNC109
    ) -> R: ...

    @overload
    async def try_ask(self, msg: M, *, timeout: float | None = ...) -> Any: ...  # noqa: ASYNC109

    async def try_ask(
        self,
        msg: Any,
        *,
        timeout: float | None = DEFAULT_ASK_TIMEOUT,  # noqa: ASYNC109 (see ask)
    ) -> Any:
        """Like :meth:`ask`, but raise :class:`MailboxFull` at once if the mailbox is full.

        For callers that prefer a quick "busy" (HTTP 503) to waiting.
        """
        return await self._ask(msg, timeout, wait_for_room=False)

    async def _ask(self, msg: Any, limit: float | None, *, wait_for_room: bool) -> Any:
        reply = Reply()
        envelope = Envelope(msg, reply)
        deadline = math.inf if limit is None else clock.now() + limit
        try:
            with trio.move_on_at(deadline):
                if wait_for_room:
                    await self._mailbox.put(envelope)
                else:
                    self._mailbox.put_nowait(envelope)
                return await reply.wait()
        finally:
            reply.abandon()  # a late answer is then dropped quietly
        if reply.done:  # answered just as the deadline hit: prefer the answer
            return reply.result()
        raise AskTimeout(f"no reply from {self.name!r} within {limit:g}s")

    def statistics(self) -> MailboxStatistics:
        return self._mailbox.statistics()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ActorRef) and other._mailbox is self._mailbox

    def __hash__(self) -> int:
        return id(self._mailbox)

    def __repr__(self) -> str:
        return f"ActorRef({self.name!r})"


class ActorContext(Generic[M]):
    """What a running actor may use: its own ref, helper tasks, timers, self-stop.

    Helper tasks run while this incarnation runs and are cancelled when it
    ends; an exception in one crashes the actor.
    """

    def __init__(
        self, ref: ActorRef[M], nursery: trio.Nursery, crash: Callable[[BaseException], None]
    ) -> None:
        self.ref = ref
        self._nursery = nursery
        self._crash = crash

    def start_soon(self, fn: Callable[..., Awaitable[object]], *args: object) -> None:
        """Run ``fn(*args)`` beside the message loop."""

        async def guarded() -> None:
            try:
                await fn(*args)
            except Exception as exc:
                self._crash(exc)

        self._nursery.start_soon(guarded)

    def tell_after(self, delay: float, msg: M) -> trio.CancelScope:
        """Send ``msg`` to this actor after ``delay`` seconds.

        Cancel the returned scope to drop the timer; it also ends with the incarnation.
        """
        scope = trio.CancelScope()

        async def timer() -> None:
            with scope:
                await trio.sleep(delay)
                with suppress(MailboxClosed, ActorGone):
                    await self.ref.tell(msg)

        self.start_soon(timer)
        return scope

    def stop(self) -> None:
        """Stop this actor in order: no new messages, drain the queue, then ``on_stop``."""
        self.ref._mailbox.close()


class Actor(Generic[M]):
    """Subclass and implement :meth:`handle`; ``M`` is the union of messages it accepts.

    ``handle``'s return value answers an ``ask``. Raising crashes the actor:
    the asker gets :class:`ActorCrashed` and the supervisor decides whether a
    fresh instance (built by the child spec's factory) takes over the mailbox.
    To refuse a request without crashing, return a value that says so.
    """

    _context: ActorContext[M] | None = None

    @property
    def context(self) -> ActorContext[M]:
        """This incarnation's context; only while it runs."""
        if self._context is None:
            raise RuntimeError(f"{type(self).__name__} is not running")
        return self._context

    async def on_start(self) -> None:
        """Called before the first message. Raising here is a crash."""

    async def handle(self, msg: M) -> Any:
        raise NotImplementedError

    async def on_stop(self) -> None:
        """Called on an orderly stop (stop, shutdown, passivation) after the queue
        is drained: persist here. Not called after a crash or a cancellation."""

    def can_passivate(self) -> bool:
        """Asked when the actor has been idle for its idle timeout; ``False`` keeps it."""
        return True


async def run_actor(
    actor: Actor[M],
    mailbox: Mailbox,
    *,
    started: Callable[[], None] = lambda: None,
    idle_timeout: float | None = None,
) -> None:
    """Run one incarnation of ``actor`` on ``mailbox``.

    Returns after an orderly end (mailbox closed and drained, or passivated
    after ``idle_timeout`` seconds without a message) and ``on_stop``; raises
    the error that crashed it. ``started`` is called once ``on_start`` is done.
    """
    failures: list[BaseException] = []
    try:
        async with trio.open_nursery() as nursery:

            def crash(error: BaseException) -> None:
                if not failures:
                    failures.append(error)
                nursery.cancel_scope.cancel()

            actor._context = ActorContext(ActorRef(mailbox), nursery, crash)
            try:
                await actor.on_start()
                started()
                await _serve(actor, mailbox, idle_timeout, failures)
                await actor.on_stop()
            except Exception as exc:
                crash(exc)
            finally:
                nursery.cancel_scope.cancel()  # helper tasks end with the incarnation
    finally:
        actor._context = None
    if failures:
        raise failures[0]


async def _serve(
    actor: Actor[M], mailbox: Mailbox, idle_timeout: float | None, failures: list[BaseException]
) -> None:
    while True:
        if idle_timeout is None:
            envelope = await mailbox.get()
        else:
            with trio.move_on_after(idle_timeout) as idle:
                envelope = await mailbox.get()
            if idle.cancelled_caught:
                if actor.can_passivate():
                    mailbox.close()  # passivate: handle what raced in, then stop
                continue
        if envelope is None:
            return
        reply = envelope.reply
        try:
            result = await actor.handle(envelope.msg)
        except Exception as exc:
            if reply is not None:
                reply.fail(ActorCrashed(mailbox.name, exc))
            raise
        except BaseException:  # cancelled: stopped after its shutdown timeout, or a helper crashed
            if reply is not None:
                if failures:
                    reply.fail(ActorCrashed(mailbox.name, failures[0]))
                else:
                    reply.fail(ActorGone(f"actor {mailbox.name!r} was stopped while handling it"))
            raise
        if reply is not None:
            reply.send(result)
