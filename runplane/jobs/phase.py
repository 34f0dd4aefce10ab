"""The job phase machine, pure: ``transition(state, event, now_ms) -> (state, effects)``.

    queued -> assigned -> pulling -> running -> succeeded | failed | timeout | cancelled
      ^          |           |          |
      +----------+-----------+----------+   node lost (or its agent drained and handed
      |          |                          the attempt back): back to queued, attempts + 1,
      |          |                          ``error`` says why until the next assignment
      |          |                          (failed after MAX_ATTEMPTS losses)
      +----------+  run order not delivered (the node went away between the plan and the
                    order): back to queued, attempts unchanged: the loss is the node's
    on a node -> queued (preempted)         stopped for a waiting job of higher priority
                                           (docs/placement.md "Preemption"): preemptions
                                           + 1, neither a failure nor an infra requeue
                                           (attempts unchanged; the next assignment's
                                           attempt number still grows: fencing)
    running -> queued (retry)              the try failed or timed out and the job's retry
                                           policy allows another: retries + 1, it waits
                                           out a backoff (``retry_at``) outside placement's
                                           queue, then ``RetryDue`` puts it back in
    any non-terminal -> cancelled           cancel

A gang (``ranks``: docs/jobs.md "Multi-node jobs") is one attempt over its ranks' nodes:
``pulling`` once any rank pulls, ``running`` once every rank runs, ``succeeded`` once
every rank did; a rank ending otherwise ends it (``rank k failed: ...``); losing a node,
an order not taken or an early end tells the other ranks to stop (``CANCEL_RANKS``).

Agent reports carry the attempt they belong to; a report for another attempt is refused
(``StaleAttempt``): fencing, so a late report from a lost node cannot touch the new attempt.
An event that makes no sense in the current phase is refused (``InvalidTransition``), never
guessed at. No trio and no I/O here: the job actor applies the effects.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

MAX_ATTEMPTS = 3


class Phase(enum.StrEnum):
    QUEUED = "queued"
    ASSIGNED = "assigned"
    PULLING = "pulling"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL

    @property
    def on_node(self) -> bool:
        return self in ON_NODE


TERMINAL = frozenset({Phase.SUCCEEDED, Phase.FAILED, Phase.TIMEOUT, Phase.CANCELLED})
ON_NODE = frozenset({Phase.ASSIGNED, Phase.PULLING, Phase.RUNNING})
PHASES = tuple(p.value for p in Phase)


class Effect(enum.Enum):
    RUN_ON_NODE = "run_on_node"  # send the run order to the assigned node
    CANCEL_ON_NODE = "cancel_on_node"  # tell the node to kill the attempt
    ENQUEUE = "enqueue"  # hand the job to placement
    DEQUEUE = "dequeue"  # take the job out of placement's queue
    RELEASE = "release"  # give the node's reserved capacity back
    COUNT_LOST = "count_lost"  # the node lost an attempt (reliability)
    RETRY_LATER = "retry_later"  # wait out the retry's backoff, then RetryDue
    CANCEL_RANKS = "cancel_ranks"  # tell a gang's ranks still on their nodes to stop


@dataclass(frozen=True, slots=True)
class RankState:
    """One rank of a gang's attempt: its node and its own phase (``assigned`` ->
    ``pulling`` -> ``running`` -> an outcome)."""

    node_id: str
    phase: Phase = Phase.ASSIGNED


@dataclass(frozen=True, slots=True)
class JobState:
    phase: Phase
    attempt: int = 0  # current attempt number; 0 before the first assignment
    attempts: int = 0  # infra requeues so far
    node_id: str | None = None
    error: str | None = None
    started_at: int | None = None
    finished_at: int | None = None
    retries: int = 0  # user-level retries so far (the job's retry policy)
    retry_at: int | None = None  # waiting out a retry's backoff until then (unix ms)
    preemptions: int = 0  # times stopped for a job of higher priority and requeued
    #: a gang's ranks in this attempt (rank i at index i; rank 0's node is ``node_id``);
    #: empty for a plain job (docs/jobs.md "Multi-node jobs")
    ranks: tuple[RankState, ...] = ()
    #: the port rank 0 listens on for the others (``RUNPLANE_MASTER_PORT``); a gang's
    master_port: int | None = None

    def rank_of(self, node_id: str) -> int | None:
        """The rank whose node is ``node_id`` (ranks are on distinct nodes)."""
        for rank, held in enumerate(self.ranks):
            if held.node_id == node_id:
                return rank
        return None


# events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Assigned:
    node_id: str
    #: a gang's rank nodes (``node_id`` first) and rank 0's port; () for a plain job
    ranks: tuple[str, ...] = ()
    master_port: int | None = None


@dataclass(frozen=True, slots=True)
class Pulling:
    attempt: int
    rank: int = 0  # a gang's rank that reported it


@dataclass(frozen=True, slots=True)
class Running:
    attempt: int
    rank: int = 0


@dataclass(frozen=True, slots=True)
class Finished:
    attempt: int
    outcome: Phase  # succeeded | failed | timeout | cancelled
    error: str | None = None
    #: the job's retry policy allows another try after this backoff (ms), if the outcome
    #: is failed or timeout; None: the outcome ends the job
    retry_in_ms: int | None = None
    rank: int = 0


@dataclass(frozen=True, slots=True)
class NodeLost:
    attempt: int
    reason: str = "node stopped heartbeating"


@dataclass(frozen=True, slots=True)
class Undelivered:
    """The run order of ``attempt`` never reached the node, or the node declined it before
    anything ran (``counted`` False: no GPU free there yet): the job goes back to the queue
    without a requeue counted against it; the node's loss counts unless it declined."""

    attempt: int
    reason: str = "node went away before the run order"
    counted: bool = True


@dataclass(frozen=True, slots=True)
class RetryDue:
    """The backoff of retry number ``retries`` is over: back in placement's queue."""

    retries: int


@dataclass(frozen=True, slots=True)
class CancelRequested:
    pass


@dataclass(frozen=True, slots=True)
class Preempted:
    """The node stopped ``attempt`` because job ``by`` preempted it: back to the queue."""

    attempt: int
    by: str


Event = (
    Assigned
    | Pulling
    | Running
    | Finished
    | NodeLost
    | Undelivered
    | RetryDue
    | CancelRequested
    | Preempted
)


class InvalidTransition(ValueError):
    def __init__(self, state: JobState, event: Event) -> None:
        super().__init__(f"{type(event).__name__} is not valid in phase {state.phase.value}")
        self.state = state
        self.event = event


class StaleAttempt(ValueError):
    def __init__(self, state: JobState, attempt: int) -> None:
        super().__init__(
            f"report for attempt {attempt} refused: current attempt is {state.attempt}"
        )
        self.state = state
        self.attempt = attempt


def _check_attempt(state: JobState, attempt: int) -> None:
    if attempt != state.attempt:
        raise StaleAttempt(state, attempt)


def transition(state: JobState, event: Event, now_ms: int) -> tuple[JobState, tuple[Effect, ...]]:
    """The next state and the effects to apply, or raise InvalidTransition/StaleAttempt."""
    phase = state.phase
    if state.ranks and phase.on_node and isinstance(event, Pulling | Running | Finished):
        _check_attempt(state, event.attempt)
        return gang_transition(state, event, now_ms)
    match event:
        case CancelRequested() if not phase.terminal:
            return _cancelled(state, now_ms)
        case Assigned(node_id, ranks, port) if phase is Phase.QUEUED and state.retry_at is None:
            nxt = replace(
                state,
                phase=Phase.ASSIGNED,
                attempt=state.attempt + 1,
                node_id=node_id,
                error=None,  # why it was requeued, if it was: said while it waited
                ranks=tuple(RankState(n) for n in ranks),
                master_port=port,
            )
            return nxt, (Effect.RUN_ON_NODE,)
        case Pulling(attempt) if phase is Phase.ASSIGNED:
            _check_attempt(state, attempt)
            return replace(state, phase=Phase.PULLING), ()
        case Running(attempt) if phase in (Phase.ASSIGNED, Phase.PULLING):
            _check_attempt(state, attempt)
            return replace(state, phase=Phase.RUNNING, started_at=now_ms), ()
        case Finished() if phase.on_node:
            _check_attempt(state, event.attempt)
            if not event.outcome.terminal:
                raise InvalidTransition(state, event)
            return _finished(state, event, now_ms)
        case NodeLost(attempt, reason) if phase.on_node:
            _check_attempt(state, attempt)
            return _lost(state, reason, now_ms)
        case RetryDue(retries) if (
            phase is Phase.QUEUED and state.retry_at is not None and retries == state.retries
        ):
            return replace(state, retry_at=None), (Effect.ENQUEUE,)
        case Preempted(attempt, by) if phase.on_node:
            _check_attempt(state, attempt)
            nxt = replace(
                state,
                phase=Phase.QUEUED,
                node_id=None,
                started_at=None,
                error=f"preempted by {by}",
                preemptions=state.preemptions + 1,
            )
            return nxt, (Effect.RELEASE, Effect.ENQUEUE)
        # a gang's: one rank's order not taken while others already pull or run
        case Undelivered(attempt, reason, counted) if phase is Phase.ASSIGNED or (
            state.ranks and phase.on_node
        ):
            _check_attempt(state, attempt)
            lost = (Effect.COUNT_LOST,) if counted else ()
            back = _back_in_queue(state, reason)
            return back, (*_stop_ranks(state), Effect.RELEASE, *lost, Effect.ENQUEUE)
    if isinstance(event, Pulling | Running | Finished | NodeLost | Undelivered | Preempted):
        _check_attempt(state, event.attempt)
    raise InvalidTransition(state, event)


def _cancelled(state: JobState, now_ms: int) -> tuple[JobState, tuple[Effect, ...]]:
    """Cancelled: out of the queue, or killed on its node and its reservation released."""
    effects: tuple[Effect, ...] = (Effect.DEQUEUE,)
    if state.phase.on_node:
        effects = (Effect.CANCEL_ON_NODE, Effect.RELEASE)
    nxt = replace(
        state, phase=Phase.CANCELLED, finished_at=now_ms, error="cancelled", retry_at=None
    )
    return nxt, effects


def _finished(state: JobState, event: Finished, now_ms: int) -> tuple[JobState, tuple[Effect, ...]]:
    """The attempt ended: a retry waits out its backoff in the queue; else the job ends."""
    outcome, error = event.outcome, event.error
    if event.retry_in_ms is not None and outcome in (Phase.FAILED, Phase.TIMEOUT):
        return (
            replace(
                state,
                phase=Phase.QUEUED,
                retries=state.retries + 1,
                retry_at=now_ms + event.retry_in_ms,
                node_id=None,
                started_at=None,
                error=f"try {state.retries + 1} {outcome.value}: {error or outcome}",
                ranks=(),
                master_port=None,
            ),
            (Effect.RELEASE, Effect.RETRY_LATER),
        )
    started = state.started_at if state.started_at is not None else now_ms
    return (
        replace(
            state,
            phase=outcome,
            error=error if outcome is not Phase.SUCCEEDED else None,
            started_at=started,
            finished_at=now_ms,
        ),
        (Effect.RELEASE,),
    )


def _lost(state: JobState, reason: str, now_ms: int) -> tuple[JobState, tuple[Effect, ...]]:
    """The node lost the attempt: back in the queue, or failed after MAX_ATTEMPTS."""
    attempts = state.attempts + 1
    if attempts >= MAX_ATTEMPTS:
        return (
            replace(
                state,
                phase=Phase.FAILED,
                attempts=attempts,
                finished_at=now_ms,
                error=f"lost its node {attempts} times (last: {reason}); giving up",
            ),
            (*_stop_ranks(state), Effect.RELEASE, Effect.COUNT_LOST),
        )
    # the queued job says why it waits again
    back = replace(_back_in_queue(state, reason), attempts=attempts)
    return back, (*_stop_ranks(state), Effect.RELEASE, Effect.COUNT_LOST, Effect.ENQUEUE)


def _back_in_queue(state: JobState, reason: str) -> JobState:
    """Queued again (the attempt's node, or a gang's ranks, given up), saying why."""
    return replace(
        state,
        phase=Phase.QUEUED,
        node_id=None,
        started_at=None,
        error=reason,
        ranks=(),
        master_port=None,
    )


def _stop_ranks(state: JobState) -> tuple[Effect, ...]:
    """A gang whose attempt ends early: its other ranks are told to stop."""
    return (Effect.CANCEL_RANKS,) if state.ranks else ()


def _with_rank(ranks: tuple[RankState, ...], rank: int, phase: Phase) -> tuple[RankState, ...]:
    return (*ranks[:rank], replace(ranks[rank], phase=phase), *ranks[rank + 1 :])


def gang_transition(
    state: JobState, event: Pulling | Running | Finished, now_ms: int
) -> tuple[JobState, tuple[Effect, ...]]:
    """A gang's rank reported (docs/jobs.md "Multi-node jobs"): the job is ``pulling``
    once any rank is, ``running`` once every rank runs; it succeeds when every rank
    succeeded; a rank ending otherwise ends the attempt (``rank k failed: <error>``, the
    retry policy applies) and the other ranks are told to stop."""
    rank = event.rank
    if not 0 <= rank < len(state.ranks):
        raise InvalidTransition(state, event)
    was = state.ranks[rank].phase
    if isinstance(event, Pulling):
        if was is not Phase.ASSIGNED:
            raise InvalidTransition(state, event)
        ranks = _with_rank(state.ranks, rank, Phase.PULLING)
        phase = Phase.PULLING if state.phase is Phase.ASSIGNED else state.phase
        return replace(state, ranks=ranks, phase=phase), ()
    if isinstance(event, Running):
        if was not in (Phase.ASSIGNED, Phase.PULLING):
            raise InvalidTransition(state, event)
        ranks = _with_rank(state.ranks, rank, Phase.RUNNING)
        if all(r.phase in (Phase.RUNNING, Phase.SUCCEEDED) for r in ranks):
            return replace(state, ranks=ranks, phase=Phase.RUNNING, started_at=now_ms), ()
        return replace(state, ranks=ranks, phase=Phase.PULLING), ()
    if was.terminal or not event.outcome.terminal:
        raise InvalidTransition(state, event)
    ranked = replace(state, ranks=_with_rank(state.ranks, rank, event.outcome))
    if event.outcome is Phase.SUCCEEDED:
        if all(r.phase is Phase.SUCCEEDED for r in ranked.ranks):
            return _finished(ranked, event, now_ms)
        return ranked, ()
    error = f"rank {rank} {event.outcome.value}: {event.error or event.outcome.value}"
    nxt, effects = _finished(ranked, replace(event, error=error), now_ms)
    return nxt, (Effect.CANCEL_RANKS, *effects)
