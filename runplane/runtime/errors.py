"""The runtime's error family.

It mirrors trio's closed-vs-broken split: :class:`MailboxClosed` is the
``ClosedResourceError`` of actors (the mailbox was closed on purpose: an
orderly stop or a passivation), :class:`ActorGone` is the
``BrokenResourceError`` (the actor ended, or died, with your message unanswered).
"""

from __future__ import annotations

from collections.abc import Hashable


class ActorError(Exception):
    """Base class of every runtime error."""


class MailboxClosed(ActorError):
    """The mailbox accepts no more messages: its actor was stopped on purpose.

    Raised by ``tell``, ``try_tell`` and ``ask``. A registry ref that sees it
    was passivated: ``get`` it again.
    """


class MailboxFull(ActorError):
    """``try_tell`` (or ``try_ask``) found the mailbox full (like ``trio.WouldBlock``)."""


class ActorGone(ActorError):
    """The actor ended before answering: it died, or stopped with the request queued.

    Also raised when sending to an actor that died for good (not restarted).
    ``__cause__`` holds the crash, when there was one.
    """


class ActorCrashed(ActorGone):
    """The actor raised while handling this very request; ``__cause__`` is the error."""

    def __init__(self, actor: str, error: BaseException) -> None:
        super().__init__(f"actor {actor!r} crashed handling the request: {error!r}")
        self.actor = actor
        self.__cause__ = error


class AskTimeout(ActorError, TimeoutError):
    """No reply within the ask timeout. The request may still be carried out."""


class Lagged(ActorError):
    """A subscriber fell behind and ``dropped`` items were lost to it.

    Receiving again continues with the oldest item still available.
    """

    def __init__(self, dropped: int) -> None:
        super().__init__(f"subscriber lagged: {dropped} item(s) dropped")
        self.dropped = dropped


class SupervisorEscalated(ActorError):
    """A supervisor exceeded its restart intensity, stopped its children and gave up.

    ``__cause__`` is the failure of the child that tipped it over (``None`` when
    that child exited normally).
    """

    def __init__(self, supervisor: str, child_id: Hashable, restarts: int, period: float) -> None:
        super().__init__(
            f"supervisor {supervisor!r} gave up: child {child_id!r} failed after "
            f"{restarts} restart(s) within {period:g}s"
        )
        self.supervisor = supervisor
        self.child_id = child_id
