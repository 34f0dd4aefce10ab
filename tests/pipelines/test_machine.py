"""The pipeline run's state machine, table-driven and without trio."""

from __future__ import annotations

from dataclasses import replace

import pytest

from runplane.pipelines.machine import (
    CancelRequested,
    JobPhase,
    Launched,
    LaunchFailed,
    NotRetryable,
    PipelineState,
    Stage,
    StagePhase,
    Status,
    Waiting,
    initial,
    launchable,
    retry,
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


# retry ------------------------------------------------------------------------------------


def launch_all(state: PipelineState, *names: str, at: int = 5) -> PipelineState:
    return run(state, *(Launched(n, f"job_{n}", at) for n in names))


def test_retry_reruns_what_did_not_succeed_and_what_needs_it() -> None:
    """a ok, b failed -> d skipped, c ok: b and d run again; a and c keep their jobs."""
    state = launch_all(diamond(), "a")
    state = run(state, done("a"))
    state = launch_all(state, "b", "c")
    state = run(state, done("b", "failed"), done("c"))
    assert state.status is Status.FAILED and phases(state)["d"] == "skipped"
    with pytest.raises(NotRetryable, match="running"):
        retry(launch_all(diamond(), "a"), 50)

    outcome = retry(state, 100)
    after = outcome.state
    assert outcome.changed == {"b", "d"} and outcome.run_changed
    assert (after.status, after.finished_at, after.retries) == (Status.RUNNING, None, 1)
    assert phases(after) == {"a": "succeeded", "b": "pending", "c": "succeeded", "d": "pending"}
    assert [after.stage(n).job_id for n in "abcd"] == ["job_a", None, "job_c", None]
    assert [after.stage(n).retry for n in "abcd"] == [0, 1, 0, 1]
    assert launchable(after) == ["b"]

    # a late report of b's first job changes nothing; its retry's job counts
    stale = JobPhase("b", "job_b", "failed", 110, "boom", {}, retry=0)
    assert transition(after, stale).state == after
    after = run(
        after, Launched("b", "job_b2", 120), JobPhase("b", "job_b2", "succeeded", 130, retry=1)
    )
    assert launchable(after) == ["d"]
    after = run(
        after, Launched("d", "job_d2", 140), JobPhase("d", "job_d2", "succeeded", 150, retry=1)
    )
    assert (after.status, after.finished_at) == (Status.SUCCEEDED, 150)
    with pytest.raises(NotRetryable, match="nothing to retry"):
        retry(after, 200)


def test_retry_of_an_allowed_failure_reruns_its_dependents_too() -> None:
    state = launch_all(diamond(a=True), "a")
    state = run(state, done("a", "failed"))
    state = launch_all(state, "b", "c")
    state = run(state, done("b"), done("c"))
    state = launch_all(state, "d")
    state = run(state, done("d"))
    assert state.status is Status.SUCCEEDED  # a's failure was allowed
    after = retry(state, 100).state
    assert phases(after) == dict.fromkeys("abcd", "pending")


def test_retry_waits_for_stage_jobs_still_ending_after_a_cancel() -> None:
    state = launch_all(diamond(), "a")
    cancelled = transition(state, CancelRequested(20)).state
    assert cancelled.status is Status.CANCELLED and cancelled.stage("a").phase.live
    with pytest.raises(NotRetryable, match="still ending"):
        retry(cancelled, 30)
    ended = run(cancelled, done("a", "cancelled"))
    assert phases(retry(ended, 40).state) == dict.fromkeys("abcd", "pending")
