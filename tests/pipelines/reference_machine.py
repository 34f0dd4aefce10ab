"""The pipeline state machine as it was before issue 42 (runplane/pipelines/machine.py at
dbc5317): it copied and scanned the stage tuple per event. Kept as the reference the
incremental machine is compared with (``test_machine_reference.py``); not used by runplane."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum


class StagePhase(StrEnum):
    PENDING = "pending"
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL_STAGE

    @property
    def live(self) -> bool:
        """Its job exists and has not ended."""
        return self in (StagePhase.QUEUED, StagePhase.RUNNING)


_TERMINAL_STAGE = frozenset(
    {StagePhase.SUCCEEDED, StagePhase.FAILED, StagePhase.SKIPPED, StagePhase.CANCELLED}
)


class Status(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (Status.SUCCEEDED, Status.FAILED, Status.CANCELLED)


#: A job phase as its stage shows it.
JOB_TO_STAGE = {
    "queued": StagePhase.QUEUED,
    "assigned": StagePhase.RUNNING,
    "pulling": StagePhase.RUNNING,
    "running": StagePhase.RUNNING,
    "succeeded": StagePhase.SUCCEEDED,
    "failed": StagePhase.FAILED,
    "timeout": StagePhase.FAILED,
    "cancelled": StagePhase.CANCELLED,
}


@dataclass(frozen=True, slots=True)
class Stage:
    name: str
    needs: tuple[str, ...] = ()
    allow_failure: bool = False
    phase: StagePhase = StagePhase.PENDING
    job_id: str | None = None
    error: str | None = None
    #: why a pending stage whose needs are met has not launched yet (quota)
    reason: str | None = None
    final_metrics: Mapping[str, float] = field(default_factory=dict)
    #: the pipeline retries that re-ran this stage (its job is the one of this retry)
    retry: int = 0

    @property
    def satisfies(self) -> bool:
        """A stage that needs this one may run."""
        return self.phase is StagePhase.SUCCEEDED or (
            self.phase is StagePhase.FAILED and self.allow_failure
        )

    @property
    def blocks(self) -> bool:
        """A stage that needs this one can never run."""
        return self.phase.terminal and not self.satisfies


@dataclass(frozen=True, slots=True)
class PipelineState:
    status: Status
    stages: tuple[Stage, ...]
    started_at: int | None = None
    finished_at: int | None = None
    #: stage name -> position in ``stages`` (fixed for the run)
    index: Mapping[str, int] = field(default_factory=dict)
    #: the run's retries so far
    retries: int = 0

    def __post_init__(self) -> None:
        if len(self.index) != len(self.stages):
            object.__setattr__(self, "index", {s.name: i for i, s in enumerate(self.stages)})

    def stage(self, name: str) -> Stage:
        return self.stages[self.index[name]]

    def progress(self) -> dict[str, int]:
        counts = {p.value: 0 for p in StagePhase}
        for stage in self.stages:
            counts[stage.phase.value] += 1
        return counts


# events ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Launched:
    """The stage's job was created (queued)."""

    stage: str
    job_id: str
    at: int


@dataclass(frozen=True, slots=True)
class Waiting:
    """The stage's needs are met but admission refused its job for now (quota)."""

    stage: str
    reason: str


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    """The stage's job could not be created (its body no longer validates)."""

    stage: str
    error: str
    at: int


@dataclass(frozen=True, slots=True)
class JobPhase:
    """The stage's job changed phase (from its job actor, or read back at a rebuild)."""

    stage: str
    job_id: str
    phase: str  # a job phase
    at: int
    error: str | None = None
    final_metrics: Mapping[str, float] = field(default_factory=dict)
    #: the retry of the stage its job was launched for (``jobs.stage_retry``)
    retry: int = 0


@dataclass(frozen=True, slots=True)
class CancelRequested:
    at: int


Event = Launched | Waiting | LaunchFailed | JobPhase | CancelRequested


@dataclass(frozen=True, slots=True)
class Outcome:
    state: PipelineState
    #: names of the stages whose row changed (to persist)
    changed: frozenset[str] = frozenset()
    #: the run's own fields (status, times) changed
    run_changed: bool = False
    #: stage jobs to cancel on their nodes
    kill: tuple[str, ...] = ()


class UnknownStage(ValueError):
    pass


def transition(state: PipelineState, event: Event) -> Outcome:
    match event:
        case CancelRequested(at):
            return _cancel(state, at)
        case Launched(name, job_id, at):
            stage = _known(state, name)
            if stage.phase is not StagePhase.PENDING:
                return Outcome(state)
            return _settle(
                state,
                {name: replace(stage, phase=StagePhase.QUEUED, job_id=job_id, reason=None)},
                at,
            )
        case Waiting(name, reason):
            stage = _known(state, name)
            if stage.phase is not StagePhase.PENDING or stage.reason == reason:
                return Outcome(state)
            return Outcome(_with(state, {name: replace(stage, reason=reason)}), frozenset({name}))
        case LaunchFailed(name, error, at):
            stage = _known(state, name)
            if stage.phase is not StagePhase.PENDING:
                return Outcome(state)
            failed = replace(stage, phase=StagePhase.FAILED, error=error, reason=None)
            return _settle(state, {name: failed}, at)
        case JobPhase(name, job_id, phase, at, error, metrics, retry):
            stage = _known(state, name)
            if retry != stage.retry:  # a job of an earlier run of the stage
                return Outcome(state)
            to = JOB_TO_STAGE[phase]
            if stage.phase.terminal or (stage.phase is to and stage.job_id == job_id):
                return Outcome(state)
            changed = replace(stage, phase=to, job_id=job_id, reason=None)
            if to.terminal:
                changed = replace(changed, error=error or None, final_metrics=dict(metrics))
            return _settle(state, {name: changed}, at)
    raise TypeError(f"not a pipeline event: {event!r}")  # pragma: no cover


def launchable(state: PipelineState) -> list[str]:
    """The pending stages whose needs are all satisfied, in submitted order; none once the
    run is over (cancelled)."""
    if state.status.terminal:
        return []
    stages, index = state.stages, state.index
    return [
        s.name
        for s in stages
        if s.phase is StagePhase.PENDING and all(stages[index[n]].satisfies for n in s.needs)
    ]


class NotRetryable(ValueError):
    """Why the run cannot be retried now (a 409 for the caller)."""


def retry(state: PipelineState, at: int) -> Outcome:
    """Re-run what did not succeed, and what needs it; raise NotRetryable when the run is
    not over, a stage job is still ending, or every stage succeeded."""
    if not state.status.terminal:
        raise NotRetryable(f"the run is {state.status.value}; retry it once it has ended")
    if any(s.phase.live for s in state.stages):
        raise NotRetryable("stage jobs of the run are still ending; retry in a moment")
    again = {
        s.name for s in state.stages if s.phase.terminal and s.phase is not StagePhase.SUCCEEDED
    }
    if not again:
        raise NotRetryable("every stage succeeded: there is nothing to retry")
    grew = True
    while grew:  # and every stage that needs one of them, transitively
        grew = False
        for s in state.stages:
            if s.name not in again and any(n in again for n in s.needs):
                again.add(s.name)
                grew = True
    updates = {
        name: replace(
            state.stage(name),
            phase=StagePhase.PENDING,
            job_id=None,
            error=None,
            reason=None,
            final_metrics={},
            retry=state.stage(name).retry + 1,
        )
        for name in again
    }
    after = replace(
        _with(state, updates),
        status=Status.RUNNING,  # its earlier jobs exist: it started when it first did
        finished_at=None,
        retries=state.retries + 1,
    )
    return Outcome(after, frozenset(updates), True)


def initial(stages: Iterable[Stage]) -> PipelineState:
    return PipelineState(Status.PENDING, tuple(stages))


# helpers --------------------------------------------------------------------------------


def _known(state: PipelineState, name: str) -> Stage:
    try:
        return state.stage(name)
    except KeyError:
        raise UnknownStage(f"the pipeline has no stage {name!r}") from None


def _with(state: PipelineState, updates: Mapping[str, Stage]) -> PipelineState:
    stages = list(state.stages)
    for name, stage in updates.items():
        stages[state.index[name]] = stage
    return replace(state, stages=tuple(stages))


def _settle(state: PipelineState, updates: dict[str, Stage], at: int) -> Outcome:
    """Apply ``updates``, skip what can no longer run, and end the run when nothing can."""
    stages = _with(state, updates).stages
    changed = set(updates)
    if any(s.blocks for s in updates.values()):
        stages = _skip_blocked(stages, changed)
    status, started, finished = state.status, state.started_at, state.finished_at
    if status is Status.PENDING and any(s.job_id for s in stages):
        status, started = Status.RUNNING, at
    if not status.terminal and all(s.phase.terminal for s in stages):
        status, finished = _final(stages), at
    after = replace(state, stages=stages, status=status, started_at=started, finished_at=finished)
    run_changed = (status, started, finished) != (
        state.status,
        state.started_at,
        state.finished_at,
    )
    return Outcome(after, frozenset(changed), run_changed)


def _skip_blocked(stages: tuple[Stage, ...], changed: set[str]) -> tuple[Stage, ...]:
    """Pending stages that need a blocking stage become ``skipped``, transitively (a stage
    comes after what it needs only in a topological order, so loop to a fixed point)."""
    by_name = {s.name: s for s in stages}
    moved = True
    while moved:
        moved = False
        for stage in list(by_name.values()):
            if stage.phase is not StagePhase.PENDING:
                continue
            blocker = next((n for n in stage.needs if by_name[n].blocks), None)
            if blocker is None:
                continue
            why = by_name[blocker].phase.value
            by_name[stage.name] = replace(
                stage,
                phase=StagePhase.SKIPPED,
                reason=None,
                error=f"skipped: it needs {blocker!r}, which {_verb(why)}",
            )
            changed.add(stage.name)
            moved = True
    return tuple(by_name[s.name] for s in stages)


def _verb(phase: str) -> str:
    return {"failed": "failed", "cancelled": "was cancelled", "skipped": "was skipped"}[phase]


def _final(stages: tuple[Stage, ...]) -> Status:
    if any(s.phase is StagePhase.FAILED and not s.allow_failure for s in stages):
        return Status.FAILED
    if any(s.phase is StagePhase.CANCELLED for s in stages):
        return Status.CANCELLED
    if any(s.phase is StagePhase.SKIPPED for s in stages):  # only after a failure: defensive
        return Status.FAILED
    return Status.SUCCEEDED


def _cancel(state: PipelineState, at: int) -> Outcome:
    if state.status.terminal:
        return Outcome(state)
    updates: dict[str, Stage] = {}
    kill: list[str] = []
    for stage in state.stages:
        if stage.phase is StagePhase.PENDING:
            updates[stage.name] = replace(
                stage, phase=StagePhase.CANCELLED, reason=None, error="the pipeline was cancelled"
            )
        elif stage.phase.live and stage.job_id is not None:
            kill.append(stage.job_id)
    after = replace(_with(state, updates), status=Status.CANCELLED, finished_at=at)
    return Outcome(after, frozenset(updates), True, tuple(kill))
