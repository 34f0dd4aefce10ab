"""The pipeline run's state machine, table-driven and without trio."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runplane.pipelines.machine import (
    CancelRequested,
    JobPhase,
    Launched,
    LaunchFailed,
    PipelineState,
    Stage,
    StagePhase,
    Status,
    Waiting,
    initial,
    launchable,
    transition,
)

P = StagePhase


def diamond(**allow: bool) -> PipelineState:
    """a -> (b, c) -> d"""
    return initial(
        [
            Stage("a", allow_failure=allow.get("a", False)),
            Stage("b", ("a",), allow_failure=allow.get("b", False)),
            Stage("c", ("a",), allow_failure=allow.get("c", False)),
            Stage("d", ("b", "c"), allow_failure=allow.get("d", False)),
        ]
    )


def run(state: PipelineState, *events: object) -> PipelineState:
    for event in events:
        state = transition(state, event).state  # type: ignore[arg-type]
    return state


def phases(state: PipelineState) -> dict[str, str]:
    return {s.name: s.phase.value for s in state.stages}


def done(stage: str, phase: str = "succeeded", at: int = 10) -> JobPhase:
    return JobPhase(stage, f"job_{stage}", phase, at, "boom" if phase != "succeeded" else None)


def launched(stage: str, at: int = 1) -> Launched:
    return Launched(stage, f"job_{stage}", at)


# (events, expected stage phases, expected status, expected launchable)
CASES = [
    pytest.param([], "pending pending pending pending", "pending", ["a"], id="fresh: root ready"),
    pytest.param(
        [launched("a")], "queued pending pending pending", "running", [], id="root launched"
    ),
    pytest.param(
        [launched("a"), JobPhase("a", "job_a", "assigned", 2)],
        "running pending pending pending",
        "running",
        [],
        id="assigned shows running",
    ),
    pytest.param(
        [launched("a"), done("a")],
        "succeeded pending pending pending",
        "running",
        ["b", "c"],
        id="root done: both branches ready",
    ),
    pytest.param(
        [launched("a"), done("a"), launched("b"), launched("c"), done("b")],
        "succeeded succeeded queued pending",
        "running",
        [],
        id="join waits for every need",
    ),
    pytest.param(
        [launched("a"), done("a"), launched("b"), launched("c"), done("b"), done("c")],
        "succeeded succeeded succeeded pending",
        "running",
        ["d"],
        id="join ready",
    ),
    pytest.param(
        [launched("a"), done("a", "failed")],
        "failed skipped skipped skipped",
        "failed",
        [],
        id="root fails: everything skipped, run failed",
    ),
    pytest.param(
        [launched("a"), done("a", "timeout")],
        "failed skipped skipped skipped",
        "failed",
        [],
        id="timeout counts as failed",
    ),
    pytest.param(
        [launched("a"), done("a"), launched("b"), launched("c"), done("b", "failed")],
        "succeeded failed queued skipped",
        "running",
        [],
        id="a failed branch skips the join, the other branch goes on",
    ),
    pytest.param(
        [
            launched("a"),
            done("a"),
            launched("b"),
            launched("c"),
            done("b", "failed"),
            done("c"),
        ],
        "succeeded failed succeeded skipped",
        "failed",
        [],
        id="run fails once nothing else can run",
    ),
    pytest.param(
        [launched("a"), done("a"), launched("b"), launched("c"), done("b", "cancelled")],
        "succeeded cancelled queued skipped",
        "running",
        [],
        id="a stage job cancelled by hand skips its dependents",
    ),
    pytest.param(
        [
            launched("a"),
            done("a"),
            launched("b"),
            launched("c"),
            done("b", "cancelled"),
            done("c"),
        ],
        "succeeded cancelled succeeded skipped",
        "cancelled",
        [],
        id="run cancelled when a stage was cancelled and none failed",
    ),
    pytest.param(
        [Waiting("a", "org quota 2 reached")],
        "pending pending pending pending",
        "pending",
        ["a"],
        id="quota wait keeps the stage pending and launchable",
    ),
    pytest.param(
        [LaunchFailed("a", "could not launch", 1)],
        "failed skipped skipped skipped",
        "failed",
        [],
        id="a launch failure fails the stage",
    ),
    pytest.param(
        [launched("a"), JobPhase("a", "job_a", "queued", 3)],
        "queued pending pending pending",
        "running",
        [],
        id="repeat of the same phase changes nothing",
    ),
    pytest.param(
        [launched("a"), JobPhase("a", "job_a", "running", 3), JobPhase("a", "job_a", "queued", 4)],
        "queued pending pending pending",
        "running",
        [],
        id="node lost: requeued job shows queued again",
    ),
    pytest.param(
        [launched("a"), done("a"), done("a", "failed")],
        "succeeded pending pending pending",
        "running",
        ["b", "c"],
        id="a terminal stage ignores later reports",
    ),
    pytest.param(
        [JobPhase("a", "job_adopted", "running", 5)],
        "running pending pending pending",
        "running",
        [],
        id="a job found at rebuild is adopted",
    ),
    pytest.param(
        [CancelRequested(5)],
        "cancelled cancelled cancelled cancelled",
        "cancelled",
        [],
        id="cancel before anything ran",
    ),
]


@pytest.mark.parametrize(("events", "want", "status", "ready"), CASES)
def test_transitions(events: list[object], want: str, status: str, ready: list[str]) -> None:
    state = run(diamond(), *events)
    assert list(phases(state).values()) == want.split()
    assert state.status.value == status
    assert launchable(state) == ready


def test_allow_failure_lets_dependents_run_as_if_it_succeeded() -> None:
    state = run(diamond(b=True), launched("a"), done("a"), launched("b"), launched("c"))
    state = run(state, done("b", "failed"), done("c"))
    assert phases(state)["b"] == "failed"
    assert launchable(state) == ["d"]
    state = run(state, launched("d"), done("d"))
    assert state.status is Status.SUCCEEDED  # failed with allow_failure: not a failure


def test_cancel_mid_run_kills_live_stage_jobs_and_cancels_pending() -> None:
    state = run(diamond(), launched("a"), done("a"), launched("b"), launched("c"))
    state = run(state, JobPhase("b", "job_b", "running", 4))
    outcome = transition(state, CancelRequested(9))
    assert sorted(outcome.kill) == ["job_b", "job_c"]
    assert outcome.state.status is Status.CANCELLED and outcome.state.finished_at == 9
    assert phases(outcome.state) == {
        "a": "succeeded",
        "b": "running",
        "c": "queued",
        "d": "cancelled",
    }
    assert outcome.changed == {"d"} and outcome.run_changed
    after = run(outcome.state, done("b", "cancelled"), done("c", "cancelled"))
    assert after.status is Status.CANCELLED
    assert launchable(after) == []
    # a second cancel changes nothing and kills nothing
    again = transition(after, CancelRequested(12))
    assert again.kill == () and not again.changed and not again.run_changed


def test_skips_are_transitive_and_say_why() -> None:
    chain = initial([Stage("a"), Stage("b", ("a",)), Stage("c", ("b",)), Stage("d", ("c",))])
    state = run(chain, launched("a"), done("a", "failed"))
    assert phases(state) == {"a": "failed", "b": "skipped", "c": "skipped", "d": "skipped"}
    assert state.stage("b").error == "skipped: it needs 'a', which failed"
    assert state.stage("c").error == "skipped: it needs 'b', which was skipped"
    assert state.progress() == {
        "pending": 0,
        "queued": 0,
        "running": 0,
        "succeeded": 0,
        "failed": 1,
        "skipped": 3,
        "cancelled": 0,
    }


def test_terminal_stage_keeps_error_and_metrics_and_times() -> None:
    state = run(diamond(), Launched("a", "job_a", 100))
    assert (state.started_at, state.status) == (100, Status.RUNNING)
    state = run(state, JobPhase("a", "job_a", "succeeded", 150, None, {"loss": 0.5}))
    assert state.stage("a").final_metrics == {"loss": 0.5}
    state = run(state, launched("b"), launched("c"), done("b"), done("c"), launched("d"))
    state = run(state, JobPhase("d", "job_d", "failed", 300, "exit code 3"))
    assert state.stage("d").error == "exit code 3"
    assert (state.status, state.finished_at) == (Status.FAILED, 300)


def test_outcome_names_only_what_changed() -> None:
    state = run(diamond(), launched("a"))
    outcome = transition(state, done("a", "failed"))
    assert outcome.changed == {"a", "b", "c", "d"} and outcome.run_changed
    quiet = transition(replace(state), Waiting("a", "x"))  # a is queued: no wait reason
    assert not quiet.changed and not quiet.run_changed


def test_a_wait_reason_is_stored_once_and_cleared_at_launch() -> None:
    state = run(diamond(), Waiting("a", "org quota reached"))
    assert state.stage("a").reason == "org quota reached"
    assert not transition(state, Waiting("a", "org quota reached")).changed
    state = run(state, launched("a"))
    assert state.stage("a").reason is None and state.stage("a").phase is P.QUEUED
