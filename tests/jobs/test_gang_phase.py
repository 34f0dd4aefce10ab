"""A gang's phase machine, pure (docs/jobs.md "Multi-node jobs"): a rank's timeout ends
the gang and stops the others, a retry policy retries the whole gang, a report of a rank
the gang does not have is refused."""

from __future__ import annotations

import pytest

from runplane.jobs.phase import (
    Assigned,
    CancelRequested,
    Effect,
    Finished,
    InvalidTransition,
    JobState,
    Phase,
    Running,
    transition,
)


def running_gang() -> JobState:
    state, effects = transition(JobState(Phase.QUEUED), Assigned("a", ("a", "b"), 29500), 1)
    assert effects == (Effect.RUN_ON_NODE,) and state.node_id == "a"
    for rank in (0, 1):
        state, _ = transition(state, Running(1, rank), 2)
    assert state.phase is Phase.RUNNING
    return state


def test_a_rank_timing_out_ends_the_gang_and_stops_the_others() -> None:
    state, effects = transition(running_gang(), Finished(1, Phase.TIMEOUT, "timed out", None, 1), 3)
    assert state.phase is Phase.TIMEOUT and state.error == "rank 1 timeout: timed out"
    assert effects == (Effect.CANCEL_RANKS, Effect.RELEASE)
    assert [r.phase for r in state.ranks] == [Phase.RUNNING, Phase.TIMEOUT]


def test_a_retry_retries_the_whole_gang() -> None:
    state, effects = transition(running_gang(), Finished(1, Phase.FAILED, "exit 1", 500, 0), 3)
    assert state.phase is Phase.QUEUED and state.retries == 1 and state.ranks == ()
    assert effects == (Effect.CANCEL_RANKS, Effect.RELEASE, Effect.RETRY_LATER)
    assert state.error == "try 1 failed: rank 0 failed: exit 1"


def test_a_cancel_stops_the_gang_and_an_unknown_rank_is_refused() -> None:
    state = running_gang()
    with pytest.raises(InvalidTransition):
        transition(state, Running(1, 2), 3)  # no rank 2
    with pytest.raises(InvalidTransition):
        transition(state, Running(1, 1), 3)  # rank 1 runs already
    cancelled, effects = transition(state, CancelRequested(), 3)
    assert cancelled.phase is Phase.CANCELLED
    assert effects == (Effect.CANCEL_ON_NODE, Effect.RELEASE)
