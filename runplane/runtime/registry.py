"""Virtual actors addressed by (kind, id), activated on demand, passivated when idle.

After Orleans grains: callers never create or destroy these actors, they
``get`` them. An actor idle for its kind's idle timeout stops in order (its
``on_stop`` persists), so a million finished jobs cost rows, not tasks.

Kinds are typed keys: ``JOBS = ActorKind[JobMsg]("job")``, so ``registry.get(JOBS, id)``
is an ``ActorRef[JobMsg]`` and ``registry.ask(JOBS, id, msg)`` types ``msg`` and (for an
``Asks[R]`` message) the answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

import trio

from .actor import DEFAULT_ASK_TIMEOUT, Actor, ActorRef, Asks
from .errors import ActorGone, MailboxClosed, MailboxFull
from .supervisor import ChildSpec, Restart, Supervisor

M = TypeVar("M")
R = TypeVar("R")

Activate = Callable[[str], Awaitable[Actor[Any]]]


@dataclass(frozen=True)  # no slots: ``ActorKind[JobMsg]("job")`` sets ``__orig_class__``
class ActorKind(Generic[M]):
    """The typed name of a kind of virtual actor; ``M`` is the union of its messages."""

    name: str


_RETRIES = 2  # extra tries of tell/ask when they race a passivation


@dataclass(frozen=True, slots=True)
class Kind:
    """A registered kind: how to activate an id, and its lifecycle settings."""

    name: str
    activate: Activate
    idle_timeout: float | None = 300.0
    restart: Restart = Restart.TRANSIENT
    mailbox_capacity: int = 64
    shutdown_timeout: float = 5.0


@dataclass(frozen=True, slots=True)
class RegistryStatistics:
    active: int  # actors live now (activating ones included)
    activations: int
    passivations: int  # ended in order: idle, stopped, or shut down
    crashes: int  # ended for good by a crash (not restarted, or escalated)


class _Entry:
    __slots__ = ("ready", "ref")

    def __init__(self) -> None:
        self.ready = trio.Event()
        self.ref: ActorRef[Any] | None = None  # None while activating, or if activation failed


class Registry:
    """Addresses actors by ``(kind, id)``; they run as dynamic children of ``supervisor``.

    The supervisor must be running. Children are started with the kind's
    restart type (``TRANSIENT`` by default: a crash restarts the actor from its
    activation function; passivation ends it).
    """

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor
        self._kinds: dict[str, Kind] = {}
        self._entries: dict[tuple[str, str], _Entry] = {}
        self._activations = 0
        self._passivations = 0
        self._crashes = 0

    def register(
        self,
        kind: ActorKind[M],
        activate: Callable[[str], Awaitable[Actor[M]]],
        *,
        idle_timeout: float | None = 300.0,
        restart: Restart = Restart.TRANSIENT,
        mailbox_capacity: int = 64,
        shutdown_timeout: float = 5.0,
    ) -> None:
        """Register ``kind``: ``await activate(id)`` builds its actor (loading state
        from the store); ``idle_timeout`` seconds without a message passivate it
        (``None``: never)."""
        if kind.name in self._kinds:
            raise ValueError(f"kind {kind.name!r} is already registered")
        if restart is Restart.PERMANENT:
            # a passivated actor must stay down until the next get
            raise ValueError("registry actors are TRANSIENT or TEMPORARY, not PERMANENT")
        self._kinds[kind.name] = Kind(
            kind.name, activate, idle_timeout, restart, mailbox_capacity, shutdown_timeout
        )

    async def get(self, kind: ActorKind[M], id: str) -> ActorRef[M]:
        """The ref of ``(kind, id)``, activating it if needed.

        Concurrent gets of one id activate it once. A get during passivation
        waits until the old activation has finished (saved), then activates
        anew. Raises what the activation function raised (e.g. not found).
        """
        spec = self._kinds.get(kind.name)
        if spec is None:
            raise LookupError(f"unknown actor kind {kind.name!r}")
        key = (kind.name, id)
        while True:
            entry = self._entries.get(key)
            if entry is None:
                return await self._activate(spec, key)
            if not entry.ready.is_set():  # the common case (already active) skips a checkpoint
                await entry.ready.wait()
            ref = entry.ref
            if ref is None:
                await trio.lowlevel.checkpoint()  # let the failed activation clear its entry
                continue  # that activation failed; try ours
            if not ref.closed:
                return ref
            await ref.wait_terminated()  # passivating: let it save first
            if self._entries.get(key) is entry:
                del self._entries[key]

    async def tell(self, kind: ActorKind[M], id: str, msg: M) -> None:
        """``get`` then ``tell``; again if it was passivated in between."""
        for _ in range(_RETRIES):
            ref = await self.get(kind, id)
            with suppress(MailboxClosed):
                return await ref.tell(msg)
        await (await self.get(kind, id)).tell(msg)

    @overload
    async def ask(
        self,
        kind: ActorKind[M],
        id: str,
        msg: Asks[R],
        *,
        timeout: float | None = ...,  # noqa: ASYNC109
    ) -> R: ...

    @overload
    async def ask(
        self,
        kind: ActorKind[M],
        id: str,
        msg: M,
        *,
        timeout: float | None = ...,  # noqa: ASYNC109
    ) -> Any: ...

    async def ask(
        self,
        kind: ActorKind[Any],
        id: str,
        msg: Any,
        *,
        timeout: float | None = DEFAULT_ASK_TIMEOUT,  # noqa: ASYNC109 (as ActorRef.ask)
    ) -> Any:
        """``get`` then ``ask``; again if it was passivated in between."""
        for _ in range(_RETRIES):
            ref = await self.get(kind, id)
            with suppress(MailboxClosed):
                return await ref.ask(msg, timeout=timeout)
        return await (await self.get(kind, id)).ask(msg, timeout=timeout)

    def tell_active(self, kind: ActorKind[M], id: str, msg: M) -> bool:
        """Tell ``(kind, id)`` without waiting and without activating it: False (nothing
        sent) when it is not active (or passivating) or its mailbox is full. For senders
        that must never block, such as an actor notifying many others from its handler."""
        entry = self._entries.get((kind.name, id))
        ref = entry.ref if entry is not None else None
        if ref is None or ref.closed:
            return False
        try:
            ref.try_tell(msg)
        except (MailboxFull, MailboxClosed, ActorGone):
            return False
        return True

    def present(self, kind: ActorKind[Any], id: str) -> bool:
        """Whether ``(kind, id)`` is activating, active or passivating (not gone)."""
        return (kind.name, id) in self._entries

    def active(self, kind: ActorKind[Any], id: str) -> bool:
        """Whether ``(kind, id)`` has a live (not passivating) activation."""
        entry = self._entries.get((kind.name, id))
        return entry is not None and entry.ref is not None and not entry.ref.closed

    async def passivate(self, kind: ActorKind[Any], id: str) -> None:
        """Passivate ``(kind, id)`` now (orderly stop, ``on_stop`` persists), if active."""
        entry = self._entries.get((kind.name, id))
        if entry is None or entry.ref is None:
            return
        with suppress(KeyError):  # it ended meanwhile
            await self._supervisor.stop_child((kind.name, id))

    def mailboxes(self) -> dict[str, tuple[int, int]]:
        """Per kind: its live actors and the messages queued in their mailboxes now."""
        out: dict[str, tuple[int, int]] = {name: (0, 0) for name in self._kinds}
        for (kind, _), entry in self._entries.items():
            actors, depth = out.get(kind, (0, 0))
            queued = entry.ref.statistics().depth if entry.ref is not None else 0
            out[kind] = (actors + 1, depth + queued)
        return out

    def statistics(self) -> RegistryStatistics:
        return RegistryStatistics(
            active=len(self._entries),
            activations=self._activations,
            passivations=self._passivations,
            crashes=self._crashes,
        )

    async def _activate(self, spec: Kind, key: tuple[str, str]) -> ActorRef[Any]:
        entry = _Entry()
        self._entries[key] = entry
        _, id = key

        def on_exit(error: BaseException | None) -> None:
            if self._entries.get(key) is entry:
                del self._entries[key]
            if error is None:
                self._passivations += 1
            else:
                self._crashes += 1

        try:
            ref = await self._supervisor.start_child(
                ChildSpec(
                    id=key,
                    factory=lambda: spec.activate(id),
                    restart=spec.restart,
                    shutdown_timeout=spec.shutdown_timeout,
                    mailbox_capacity=spec.mailbox_capacity,
                    idle_timeout=spec.idle_timeout,
                    on_exit=on_exit,
                )
            )
        except BaseException:
            if self._entries.get(key) is entry:
                del self._entries[key]
            entry.ready.set()
            raise
        entry.ref = ref
        self._activations += 1
        entry.ready.set()
        return ref
