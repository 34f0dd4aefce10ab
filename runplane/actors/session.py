"""The session actor: one per live session, owning its phase machine
(``runplane/sessions/machine.py``) and the reaper's timer.

It hears of its pod job's phases from the job's actor (``JobPhase``), takes keepalives and
stops, and wakes at the session's next deadline (half the TTL after the last keepalive: the
session goes ``idle``; the whole TTL: it is reaped). Every phase change is written before
the actor answers or acts on it. A keepalive that changes no phase is a liveness signal,
not a durable write: ``last_keepalive`` is kept here (the timers read it) and handed to
the keepalive log (``runplane/actors/keepalives.py``), which writes every session's in one
batch per period; a keepalive only moves deadlines later, so the timer is not reset: when
it fires early it is set again from the newer value. When the timer fires, an open driving
connection (``runplane/sessions/drivers.py``) counts as a keepalive. Started again (a
crash, a server restart) it reads its row and its job's phase from the store, so the
deadlines hold across restarts (they are computed from the stored last keepalive, at most
one flush period old). A session being stopped has its job cancelled
by a helper task, never from the message loop, so the job's own report back never waits
on this actor. It passivates once stopped or failed.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import assert_never

import trio

from runplane.persistence import Store
from runplane.runtime import Actor, ActorKind, Asks, clock
from runplane.sessions import repo
from runplane.sessions.drivers import Drivers
from runplane.sessions.machine import (
    Event,
    JobPhase,
    Keepalive,
    Outcome,
    Phase,
    SessionState,
    Stop,
    Tick,
    transition,
)

log = logging.getLogger("runplane.sessions")


def now_ms() -> int:
    """Unix ms from the runtime's wall clock (tests drive it with the autojump clock)."""
    return int(clock.wall() * 1000)


@dataclass(frozen=True, slots=True)
class SessionDeps:
    store: Store
    #: cancel the pod job (kill it on its node)
    cancel_job: Callable[[str], Awaitable[None]]
    #: hand a keepalive (session id, unix ms) to the keepalive log (no write)
    kept: Callable[[str, int], Awaitable[None]]
    #: the open driving connections (stream followers that may drive the session)
    drivers: Drivers
    #: the shortest idle_ttl_sec whose keepalives are written lazily (shorter: at once)
    lazy_from_ttl_sec: int


@dataclass(frozen=True, slots=True)
class KeepaliveAsk(Asks["str | SessionState"]):
    """Refresh the keepalive; answers why not (the session is not live) or the session's
    state after it."""


@dataclass(frozen=True, slots=True)
class StopAsk(Asks[bool]):
    """Stop the session (DELETE); answers whether its job must be cancelled now."""


@dataclass(frozen=True, slots=True)
class Sync(Asks[None]):
    """Answered once everything queued before it was handled."""


@dataclass(frozen=True, slots=True)
class Wake:
    """The reaper's timer: a deadline may have passed."""


SessionMsg = JobPhase | KeepaliveAsk | StopAsk | Sync | Wake

#: The session actors, one per live session, addressed by session id.
SESSIONS = ActorKind[SessionMsg]("session")


class SessionActor(Actor[SessionMsg]):
    def __init__(self, deps: SessionDeps, row: repo.SessionRow) -> None:
        self.deps = deps
        self.id = row.id
        self.job_id = row.job_id
        self.state: SessionState = row.state
        self._timer: trio.CancelScope | None = None

    async def on_start(self) -> None:
        was_stopping = self.state.phase is Phase.STOPPING
        found = await repo.job_phase(self.deps.store, self.job_id)
        if found is not None:
            await self._apply(JobPhase(found[0], now_ms(), found[1]))
        await self._apply(Tick(now_ms()))  # a deadline that passed while it was down
        if was_stopping and self.state.phase is Phase.STOPPING:
            self.context.start_soon(self._cancel_job)  # again: the last try may be lost
        self._schedule()

    def can_passivate(self) -> bool:
        return self.state.phase.terminal

    async def on_stop(self) -> None:
        if self.state.phase.terminal:
            self.deps.drivers.forget(self.id)

    async def handle(self, msg: SessionMsg) -> object:
        match msg:
            case JobPhase():
                await self._apply(msg)
                return None
            case KeepaliveAsk():
                return await self._keepalive(now_ms())
            case StopAsk():
                outcome = await self._apply(Stop(now_ms()), cancel=False)
                return outcome.cancel_job
            case Wake():
                self._timer = None
                driven = self.deps.drivers.seen(self.id, now_ms())
                if driven is not None:
                    await self._keepalive(driven)
                await self._apply(Tick(now_ms()))
                if self._timer is None:  # nothing changed: the deadline moved later
                    self._schedule()
                return None
            case Sync():
                return None
            case _:
                assert_never(msg)

    async def _keepalive(self, at: int) -> str | SessionState:
        outcome = transition(self.state, Keepalive(at))
        if outcome.refused is not None:
            return outcome.refused
        lazy = self.state.idle_ttl_sec >= self.deps.lazy_from_ttl_sec
        if outcome.state.phase is not self.state.phase or not lazy:
            await self._save(outcome)  # idle -> ready: a phase change, written now
        elif outcome.state != self.state:
            self.state = outcome.state  # the timer is not reset (see the module's doc)
            await self.deps.kept(self.id, self.state.last_keepalive)
        return self.state

    async def _apply(self, event: Event, *, cancel: bool = True) -> Outcome:
        outcome = transition(self.state, event)
        await self._save(outcome)
        if outcome.cancel_job and cancel:
            self.context.start_soon(self._cancel_job)
        return outcome

    async def _save(self, outcome: Outcome) -> None:
        if not outcome.changed:
            return
        before = self.state
        await self.deps.store.transaction(repo.save(self.id, outcome.state))
        self.state = outcome.state
        if before.phase is not self.state.phase:
            log.info(
                "session phase",
                extra={
                    "session_id": self.id,
                    "from": before.phase.value,
                    "to": self.state.phase.value,
                    "error": self.state.error,
                },
            )
        if self._context is not None:
            self._schedule()

    def _schedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        deadline = self.state.next_deadline()
        if deadline is None:
            return
        delay = max(0.0, (deadline - now_ms()) / 1000)
        self._timer = self.context.tell_after(delay, Wake())

    async def _cancel_job(self) -> None:
        await self.deps.cancel_job(self.job_id)
