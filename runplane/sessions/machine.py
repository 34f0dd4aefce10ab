"""The session phase machine, pure: ``transition(state, event) -> Outcome``, times in unix
ms carried by the events (table-tested without trio: ``tests/sessions/test_machine.py``).

Phases (conventions, Sessions): ``launching`` (the pod job exists, its services are
starting) -> ``ready`` (the agent reported the pod running: every service up, health gates
passed) -> ``idle`` (no keepalive for half of ``idle_ttl_sec``; a keepalive brings it
back to ``ready``) -> at ``idle_ttl_sec`` without a keepalive the reaper stops it:
``stopping`` (the pod job is cancelled) then ``stopped``, with the reason in ``error``.
``DELETE`` goes through ``stopping`` to ``stopped``. The pod job ending by itself (a
service exited, a health gate ran out of retries, a timeout) is ``failed`` with the job's
error. A launching session is reaped at the TTL too (it bounds every session's life).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class Phase(StrEnum):
    LAUNCHING = "launching"
    READY = "ready"
    IDLE = "idle"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"

    @property
    def live(self) -> bool:
        return self in (Phase.LAUNCHING, Phase.READY, Phase.IDLE)

    @property
    def terminal(self) -> bool:
        return self in (Phase.STOPPED, Phase.FAILED)


_TERMINAL_JOB = frozenset({"succeeded", "failed", "timeout", "cancelled"})


@dataclass(frozen=True, slots=True)
class SessionState:
    phase: Phase
    idle_ttl_sec: int
    last_keepalive: int  # unix ms (the creation time until the first keepalive)
    started_at: int | None = None
    stopped_at: int | None = None
    error: str | None = None

    @property
    def idle_at(self) -> int:
        return self.last_keepalive + self.idle_ttl_sec * 500

    @property
    def reap_at(self) -> int:
        return self.last_keepalive + self.idle_ttl_sec * 1000

    def next_deadline(self) -> int | None:
        """When a ``Tick`` may change something (unix ms), None when nothing will."""
        if self.phase is Phase.READY:
            return self.idle_at
        if self.phase in (Phase.LAUNCHING, Phase.IDLE):
            return self.reap_at
        return None


@dataclass(frozen=True, slots=True)
class JobPhase:
    phase: str  # the pod job's phase
    at: int
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Keepalive:
    at: int


@dataclass(frozen=True, slots=True)
class Tick:
    """A deadline may have passed (the reaper's timer)."""

    at: int


@dataclass(frozen=True, slots=True)
class Stop:
    """``DELETE /v1/sessions/{id}``."""

    at: int


Event = JobPhase | Keepalive | Tick | Stop


@dataclass(frozen=True, slots=True)
class Outcome:
    state: SessionState
    changed: bool = False
    #: the pod job must be cancelled (stopping)
    cancel_job: bool = False
    #: why the event was refused (a keepalive of a session that is not live: 409)
    refused: str | None = None


def transition(state: SessionState, event: Event) -> Outcome:
    match event:
        case Keepalive(at):
            if not state.phase.live:
                return Outcome(state, refused=f"the session is {state.phase.value}, not live")
            phase = Phase.READY if state.phase is Phase.IDLE else state.phase
            return Outcome(
                replace(state, phase=phase, last_keepalive=max(at, state.last_keepalive)), True
            )
        case Tick(at):
            if not state.phase.live:
                return Outcome(state)
            if at >= state.reap_at:
                reason = (
                    f"reaped: no keepalive for {state.idle_ttl_sec} s (idle_ttl_sec); send"
                    " POST /v1/sessions/{id}/keepalive well within it to keep a session"
                )
                return Outcome(replace(state, phase=Phase.STOPPING, error=reason), True, True)
            if state.phase is Phase.READY and at >= state.idle_at:
                return Outcome(replace(state, phase=Phase.IDLE), True)
            return Outcome(state)
        case Stop(at):
            if not state.phase.live:
                return Outcome(state)
            return Outcome(replace(state, phase=Phase.STOPPING), True, True)
        case JobPhase(phase, at, error):
            return _job_phase(state, phase, at, error)
    raise TypeError(f"not a session event: {event!r}")  # pragma: no cover


def _job_phase(state: SessionState, phase: str, at: int, error: str | None) -> Outcome:
    if state.phase.terminal:
        return Outcome(state)
    if phase in _TERMINAL_JOB:
        if state.phase is Phase.STOPPING:
            return Outcome(replace(state, phase=Phase.STOPPED, stopped_at=at), True)
        why = error or (
            "the pod ended: its services exited" if phase == "succeeded" else f"the pod job {phase}"
        )
        return Outcome(replace(state, phase=Phase.FAILED, stopped_at=at, error=why), True)
    if state.phase is Phase.STOPPING:
        return Outcome(state)
    if phase == "running":
        if state.phase is Phase.LAUNCHING:
            started = state.started_at if state.started_at is not None else at
            return Outcome(replace(state, phase=Phase.READY, started_at=started), True)
        return Outcome(state)
    # queued, assigned, pulling: (back to) launching, e.g. after the node was lost
    if state.phase is Phase.LAUNCHING:
        return Outcome(state)
    return Outcome(replace(state, phase=Phase.LAUNCHING), True)
