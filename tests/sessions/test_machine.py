"""The session phase machine, table-driven and without trio."""

from __future__ import annotations

import pytest

from runplane.sessions.machine import (
    JobPhase,
    Keepalive,
    Phase,
    SessionState,
    Stop,
    Tick,
    transition,
)

TTL = 100  # seconds: idle at +50 s, reaped at +100 s
T0 = 1_000_000


def fresh() -> SessionState:
    return SessionState(Phase.LAUNCHING, TTL, last_keepalive=T0)


def run(*events: object) -> tuple[SessionState, list[tuple[bool, bool, str | None]]]:
    state, seen = fresh(), []
    for event in events:
        outcome = transition(state, event)  # type: ignore[arg-type]
        seen.append((outcome.changed, outcome.cancel_job, outcome.refused))
        state = outcome.state
    return state, seen


def s(seconds: float) -> int:
    return T0 + int(seconds * 1000)


CASES = [
    pytest.param([], "launching", id="created"),
    pytest.param([JobPhase("assigned", s(1)), JobPhase("pulling", s(2))], "launching", id="placed"),
    pytest.param([JobPhase("running", s(3))], "ready", id="pod up: ready"),
    pytest.param([JobPhase("running", s(3)), Tick(s(49))], "ready", id="before half the ttl"),
    pytest.param([JobPhase("running", s(3)), Tick(s(50))], "idle", id="half the ttl: idle"),
    pytest.param(
        [JobPhase("running", s(3)), Tick(s(60)), Keepalive(s(61))],
        "ready",
        id="keepalive wakes an idle session",
    ),
    pytest.param(
        [JobPhase("running", s(3)), Keepalive(s(40)), Tick(s(89))],
        "ready",
        id="keepalive moves the deadlines",
    ),
    pytest.param(
        [JobPhase("running", s(3)), Tick(s(100))], "stopping", id="ttl without keepalive: reaped"
    ),
    pytest.param([Tick(s(100))], "stopping", id="a launching session is reaped too"),
    pytest.param(
        [JobPhase("running", s(3)), Tick(s(100)), JobPhase("cancelled", s(101))],
        "stopped",
        id="reaped, then the pod job is gone: stopped",
    ),
    pytest.param([Stop(s(5))], "stopping", id="delete"),
    pytest.param([Stop(s(5)), JobPhase("cancelled", s(5))], "stopped", id="delete, job cancelled"),
    pytest.param(
        [JobPhase("running", s(3)), JobPhase("failed", s(9), "service 'sim' exited with code 2")],
        "failed",
        id="a service exits: failed",
    ),
    pytest.param(
        [JobPhase("running", s(3)), JobPhase("queued", s(9))],
        "launching",
        id="node lost: back to launching",
    ),
    pytest.param(
        [Stop(s(5)), JobPhase("running", s(6))], "stopping", id="a late running report is ignored"
    ),
]


@pytest.mark.parametrize(("events", "phase"), CASES)
def test_phases(events: list[object], phase: str) -> None:
    state, _ = run(*events)
    assert state.phase.value == phase


def test_reaping_cancels_the_job_and_says_why() -> None:
    state, seen = run(JobPhase("running", s(3)), Tick(s(100)))
    assert seen[-1] == (True, True, None)
    assert state.error is not None and "no keepalive for 100 s" in state.error
    state, _ = run(JobPhase("running", s(3)), Tick(s(100)), JobPhase("cancelled", s(101)))
    assert (state.phase, state.stopped_at) == (Phase.STOPPED, s(101))
    assert state.error is not None and state.error.startswith("reaped")


def test_delete_cancels_the_job_once() -> None:
    state, seen = run(Stop(s(5)), Stop(s(6)))
    assert seen == [(True, True, None), (False, False, None)]
    assert state.error is None


def test_keepalive_of_a_session_that_is_not_live_is_refused() -> None:
    _, seen = run(Stop(s(5)), JobPhase("cancelled", s(5)), Keepalive(s(6)))
    assert seen[-1] == (False, False, "the session is stopped, not live")
    _, seen = run(Stop(s(5)), Keepalive(s(6)))
    assert seen[-1][2] == "the session is stopping, not live"


def test_deadlines_follow_the_phase() -> None:
    state = fresh()
    assert state.next_deadline() == s(100)  # launching: only the reaper
    ready = transition(state, JobPhase("running", s(3))).state
    assert (ready.started_at, ready.next_deadline()) == (s(3), s(50))
    idle = transition(ready, Tick(s(50))).state
    assert idle.next_deadline() == s(100)
    kept = transition(idle, Keepalive(s(70))).state
    assert (kept.phase, kept.next_deadline()) == (Phase.READY, s(120))
    stopped = transition(transition(kept, Stop(s(71))).state, JobPhase("cancelled", s(72))).state
    assert stopped.next_deadline() is None


def test_a_pod_that_ends_on_its_own_fails_with_the_jobs_error() -> None:
    state, _ = run(JobPhase("running", s(3)), JobPhase("succeeded", s(4)))
    assert (state.phase, state.error) == (Phase.FAILED, "the pod ended: its services exited")
    state, _ = run(JobPhase("timeout", s(4), "timed out after 1 h"))
    assert (state.phase, state.error) == (Phase.FAILED, "timed out after 1 h")
    # and nothing moves it afterwards
    assert not transition(state, Keepalive(s(5))).changed
    assert not transition(state, JobPhase("running", s(6))).changed
