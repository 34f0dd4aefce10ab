"""The job phase machine, table-driven, no trio."""

from __future__ import annotations

import pytest

from runplane.jobs.phase import (
    MAX_ATTEMPTS,
    Assigned,
    CancelRequested,
    Effect,
    Finished,
    InvalidTransition,
    JobState,
    NodeLost,
    Phase,
    Pulling,
    RetryDue,
    Running,
    StaleAttempt,
    Undelivered,
    transition,
)

Q, A, P, R = Phase.QUEUED, Phase.ASSIGNED, Phase.PULLING, Phase.RUNNING
S, F, T, C = Phase.SUCCEEDED, Phase.FAILED, Phase.TIMEOUT, Phase.CANCELLED


def st(phase: Phase, attempt: int = 1, attempts: int = 0) -> JobState:
    node = "node_a" if phase.on_node else None
    return JobState(phase=phase, attempt=attempt, attempts=attempts, node_id=node)


VALID = [
    (JobState(Q), Assigned("node_a"), A, (Effect.RUN_ON_NODE,)),
    (st(A), Pulling(1), P, ()),
    (st(A), Running(1), R, ()),
    (st(P), Running(1), R, ()),
    (st(R), Finished(1, S), S, (Effect.RELEASE,)),
    (st(R), Finished(1, F, "exit code 3"), F, (Effect.RELEASE,)),
    (st(R), Finished(1, T, "timed out"), T, (Effect.RELEASE,)),
    (st(P), Finished(1, F, "workspace failed"), F, (Effect.RELEASE,)),
    (st(A), Finished(1, C), C, (Effect.RELEASE,)),
    (JobState(Q), CancelRequested(), C, (Effect.DEQUEUE,)),
    (st(A), CancelRequested(), C, (Effect.CANCEL_ON_NODE, Effect.RELEASE)),
    (st(R), CancelRequested(), C, (Effect.CANCEL_ON_NODE, Effect.RELEASE)),
    (st(R), NodeLost(1), Q, (Effect.RELEASE, Effect.COUNT_LOST, Effect.ENQUEUE)),
    (st(A), NodeLost(1), Q, (Effect.RELEASE, Effect.COUNT_LOST, Effect.ENQUEUE)),
    (st(R, 3, MAX_ATTEMPTS - 1), NodeLost(3), F, (Effect.RELEASE, Effect.COUNT_LOST)),
    (st(A), Undelivered(1), Q, (Effect.RELEASE, Effect.COUNT_LOST, Effect.ENQUEUE)),
    # declined by the node before anything ran (its GPUs still held): not the node's loss
    (st(A), Undelivered(1, "no GPU free yet", counted=False), Q, (Effect.RELEASE, Effect.ENQUEUE)),
    # never a failure: an order that never reached a node is not a loss of the job's
    (
        st(A, 3, MAX_ATTEMPTS - 1),
        Undelivered(3),
        Q,
        (Effect.RELEASE, Effect.COUNT_LOST, Effect.ENQUEUE),
    ),
]


@pytest.mark.parametrize(("state", "event", "phase", "effects"), VALID)
def test_valid_transitions(
    state: JobState, event: object, phase: Phase, effects: tuple[Effect, ...]
) -> None:
    nxt, got = transition(state, event, now_ms=1000)  # type: ignore[arg-type]
    assert nxt.phase is phase
    assert got == effects


INVALID = [
    (JobState(Q), Pulling(0)),
    (JobState(Q), Running(0)),
    (JobState(Q), Finished(0, S)),
    (JobState(Q), NodeLost(0)),
    (st(A), Assigned("node_b")),
    (st(R), Pulling(1)),
    (st(R), Assigned("node_b")),
    (st(R), Finished(1, R)),
    *[(st(term), CancelRequested()) for term in (S, F, T, C)],
    *[(st(term), Finished(1, S)) for term in (S, F, T, C)],
    *[(st(term), NodeLost(1)) for term in (S, F, T, C)],
    *[(st(term), Running(1)) for term in (S, F, T, C)],
    # the order of a job the agent already started was delivered
    *[(st(ph), Undelivered(1)) for ph in (Q, P, R, S, F, T, C)],
    # a job waiting out a retry's backoff is not placed; a backoff it does not wait ends
    (JobState(Q, retries=1, retry_at=5000), Assigned("node_a")),
    (JobState(Q), RetryDue(0)),
    (JobState(Q, retries=2, retry_at=5000), RetryDue(1)),
    *[(st(ph), RetryDue(0)) for ph in (A, P, R, S, F, T, C)],
]


@pytest.mark.parametrize(("state", "event"), INVALID)
def test_invalid_transitions_are_refused(state: JobState, event: object) -> None:
    with pytest.raises(InvalidTransition):
        transition(state, event, now_ms=1000)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "event", [Pulling(1), Running(1), Finished(1, S), NodeLost(1), Undelivered(1)]
)
def test_report_from_old_attempt_is_fenced(event: object) -> None:
    state = st(R, attempt=2, attempts=1)
    with pytest.raises(StaleAttempt):
        transition(state, event, now_ms=1000)  # type: ignore[arg-type]


def test_assignment_counts_attempts_and_loss_requeues() -> None:
    state = JobState(Q)
    for lost in range(1, MAX_ATTEMPTS + 1):
        state, _ = transition(state, Assigned(f"node_{lost}"), 10)
        assert state.attempt == lost and state.node_id == f"node_{lost}"
        state, _ = transition(state, Running(lost), 20)
        assert state.started_at == 20
        state, _ = transition(state, NodeLost(lost, "no heartbeat"), 30)
        assert state.attempts == lost
    assert state.phase is F
    assert "lost its node 3 times" in (state.error or "")
    assert state.finished_at == 30


def test_finish_times_and_error() -> None:
    state, _ = transition(st(A), Running(1), 100)
    state, _ = transition(state, Finished(1, F, "exit code 3"), 250)
    assert (state.started_at, state.finished_at, state.error) == (100, 250, "exit code 3")
    ok, _ = transition(st(R), Finished(1, S, "ignored"), 5)
    assert ok.error is None


def test_a_requeued_job_says_why_until_it_is_assigned_again() -> None:
    reason = "node node_a shut down (agent drained; requeued)"
    state, effects = transition(st(R), NodeLost(1, reason), 40)
    assert (state.phase, state.attempts, state.error) == (Q, 1, reason)
    assert effects == (Effect.RELEASE, Effect.COUNT_LOST, Effect.ENQUEUE)
    state, _ = transition(state, Assigned("node_b"), 50)
    assert (state.phase, state.attempt, state.error) == (A, 2, None)


def test_an_undelivered_order_requeues_without_counting_a_requeue() -> None:
    state = st(A, attempt=2, attempts=1)
    nxt, _ = transition(state, Undelivered(2, "node node_a went away"), now_ms=1000)
    assert (nxt.phase, nxt.attempt, nxt.attempts) == (Q, 2, 1)
    assert (nxt.node_id, nxt.error) == (None, "node node_a went away")


def test_a_retried_try_goes_back_to_queued_with_its_due_time_then_into_the_queue() -> None:
    state, effects = transition(st(R, attempt=1), Finished(1, F, "exit code 1", 30_000), 100)
    assert (state.phase, state.retries, state.retry_at) == (Q, 1, 30_100)
    assert (state.node_id, state.started_at, state.error) == (
        None,
        None,
        "try 1 failed: exit code 1",
    )
    assert effects == (Effect.RELEASE, Effect.RETRY_LATER)
    state, effects = transition(state, RetryDue(1), 30_100)
    assert (state.phase, state.retry_at, effects) == (Q, None, (Effect.ENQUEUE,))
    state, _ = transition(state, Assigned("node_b"), 30_200)
    assert (state.attempt, state.retries, state.error) == (2, 1, None)
    # a timeout retries the same way; a success or a cancel never does
    timed, _ = transition(st(R), Finished(1, T, None, 0), 5)
    assert (timed.phase, timed.error) == (Q, "try 1 timeout: timeout")
    for outcome in (S, C):
        ended, effects = transition(st(R), Finished(1, outcome, None, 1000), 5)
        assert ended.phase is outcome and effects == (Effect.RELEASE,)


def test_cancel_during_a_backoff_ends_it() -> None:
    waiting = JobState(Q, attempt=1, retries=1, retry_at=9000)
    state, effects = transition(waiting, CancelRequested(), 100)
    assert (state.phase, state.retry_at, effects) == (C, None, (Effect.DEQUEUE,))
