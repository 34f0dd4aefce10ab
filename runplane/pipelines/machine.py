"""The pipeline run's state machine, pure: ``transition(state, event) -> Outcome``.

No I/O and no clock of its own (events carry their time), so it is tested table-driven
without trio (``tests/pipelines/test_machine.py``, and against the machine it replaced
over random DAGs, ``test_machine_reference.py``). The pipeline actor applies events,
persists what changed, then launches ``launchable(state)`` and cancels ``Outcome.kill``.

A stage event costs O(1) however wide the run (issue 42): the stages are indexed by name,
each keeps a count of its needs not yet satisfied (decremented as each one succeeds), the
ready set and the phase counts are kept as stages move (:class:`_Tables`), so nothing
scans or copies the stages per event. A 1,000-wide fan-out's join is launchable the
moment its count reaches zero.

Stage phases (conventions, Pipelines): ``pending`` until launched (needs not met, or
waiting for quota with a ``reason``), ``queued`` (its job exists, not yet on a node),
``running`` (job assigned, pulling or running), then ``succeeded``, ``failed`` (the job
failed or timed out, or could not be launched), ``skipped`` (a needed stage failed without
``allow_failure``, was cancelled or skipped) or ``cancelled``.

Run status: ``pending`` until its first stage job exists, then ``running``; once no stage
can run any more: ``failed`` if a stage without ``allow_failure`` failed, else
``cancelled`` if a stage was cancelled, else ``succeeded``. Cancelling the run makes it
``cancelled`` at once: pending stages are cancelled, live stage jobs are killed (their
stages become ``cancelled`` as the jobs confirm).

Retry (:func:`retry`, once the run is over and no stage job is live): the stages that did
not succeed (failed, timed out, cancelled, skipped) and every stage that needs one of
them, transitively, go back to ``pending`` with their ``retry`` number raised; succeeded
stages keep their jobs (and so their artifacts). The run is ``running`` again. A stage
job's phase counts only for its stage's current retry (``JobPhase.retry``).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import InitVar, dataclass, field, replace
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


#: How far back an older state can be read: this many changes per stage (a stage changes a
#: handful of times per try); older ones are forgotten (the actor keeps only the newest).
HISTORY_PER_STAGE = 16


class _Tables:
    """The run's stages and what is derived from them, kept up to date one stage at a
    time (:meth:`put`): the stages by name (in submitted order), their positions, who needs
    whom, each stage's count of needs not yet satisfied, the ready set (pending, every need
    satisfied), and counts for the run's status and progress. Shared by the states of one
    run: a transition updates it in place and bumps ``version``; ``history`` keeps each
    replaced stage with the version it belonged to, so an older state can still be read
    (:meth:`as_of`), back to :data:`HISTORY_PER_STAGE` changes per stage."""

    __slots__ = (
        "by_name",
        "dependents",
        "failed_hard",
        "forgot",
        "history",
        "order",
        "phases",
        "ready",
        "unmet",
        "version",
        "with_job",
    )

    def __init__(self, stages: Iterable[Stage]) -> None:
        self.by_name: dict[str, Stage] = {s.name: s for s in stages}
        self.order = {name: i for i, name in enumerate(self.by_name)}
        self.dependents: dict[str, list[str]] = {name: [] for name in self.by_name}
        for s in self.by_name.values():
            for need in dict.fromkeys(s.needs):
                self.dependents[need].append(s.name)
        self.unmet = {
            s.name: sum(1 for n in dict.fromkeys(s.needs) if not self.by_name[n].satisfies)
            for s in self.by_name.values()
        }
        self.ready = {
            n
            for n, s in self.by_name.items()
            if s.phase is StagePhase.PENDING and not self.unmet[n]
        }
        self.phases = dict.fromkeys(StagePhase, 0)
        self.with_job = 0  # stages with a job id
        self.failed_hard = 0  # failed without allow_failure
        for s in self.by_name.values():
            self._count(s, 1)
        self.version = 0
        self.history: list[tuple[int, Stage]] = []
        self.forgot = -1  # the newest version whose changes were dropped from history

    def _count(self, s: Stage, by: int) -> None:
        self.phases[s.phase] += by
        self.with_job += by if s.job_id else 0
        self.failed_hard += by if s.phase is StagePhase.FAILED and not s.allow_failure else 0

    def put(self, new: Stage) -> None:
        """Replace the stage of ``new``'s name, keeping everything derived up to date:
        O(1), plus O(dependents) when whether it satisfies its dependents changes."""
        old = self.by_name[new.name]
        self.history.append((self.version, old))
        if len(self.history) > HISTORY_PER_STAGE * len(self.by_name) + 64:
            half = len(self.history) // 2
            self.forgot = self.history[half - 1][0]
            del self.history[:half]  # amortized O(1)
        self._count(old, -1)
        self._count(new, 1)
        self.by_name[new.name] = new
        if old.satisfies != new.satisfies:
            by = -1 if new.satisfies else 1
            for d in self.dependents[new.name]:
                self.unmet[d] += by
                self._mark(d)
        self._mark(new.name)

    def as_of(self, version: int) -> _Tables:
        """New tables holding the stages as they were at ``version`` (O(stages + the
        changes since)): what an older state reads (tests, never the actor)."""
        stages = dict(self.by_name)
        if version <= self.forgot:
            raise RuntimeError(f"pipeline state version {version} is too old to read back")
        for at, old in reversed(self.history):
            if at < version:
                break
            stages[old.name] = old
        return _Tables(stages.values())

    def _mark(self, name: str) -> None:
        if self.by_name[name].phase is StagePhase.PENDING and not self.unmet[name]:
            self.ready.add(name)
        else:
            self.ready.discard(name)


@dataclass(frozen=True, slots=True, eq=False)
class PipelineState:
    """A run's state. Its stages live in tables shared with the states it came from and
    goes to: a transition updates them in place (O(1) per stage event, however wide the
    run) and answers a new state. An older state stays valid: read (or transitioned)
    again, it first copies the tables as they were at its version (O(stages), once);
    the pipeline actor only ever uses the newest."""

    status: Status
    seed: InitVar[Iterable[Stage]] = ()
    started_at: int | None = None
    finished_at: int | None = None
    #: the run's retries so far
    retries: int = 0
    _t: _Tables | None = field(default=None, repr=False)
    _version: int = field(default=0, repr=False)

    def __post_init__(self, seed: Iterable[Stage]) -> None:
        if self._t is None:
            object.__setattr__(self, "_t", _Tables(seed))

    @property
    def tables(self) -> _Tables:
        t = self._t
        assert t is not None
        if t.version != self._version:  # a later transition moved the tables on
            t = t.as_of(self._version)
            object.__setattr__(self, "_t", t)
            object.__setattr__(self, "_version", 0)
        return t

    def _next(self, **fields: object) -> PipelineState:
        """The state after this one, the tables having just been updated in place."""
        t = self.tables
        t.version += 1
        return replace(self, _version=t.version, **fields)  # type: ignore[arg-type]

    @property
    def stages(self) -> tuple[Stage, ...]:
        """Every stage in submitted order (a copy: for views and tests, not per event)."""
        return tuple(self.tables.by_name.values())

    @property
    def index(self) -> Mapping[str, int]:
        """Stage name -> position in submitted order."""
        return self.tables.order

    def stage(self, name: str) -> Stage:
        return self.tables.by_name[name]

    def progress(self) -> dict[str, int]:
        return {p.value: n for p, n in self.tables.phases.items()}

    @property
    def live(self) -> bool:
        """A stage job of the run exists and has not ended."""
        phases = self.tables.phases
        return bool(phases[StagePhase.QUEUED] or phases[StagePhase.RUNNING])


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
    """O(1) for a stage event (plus the stages it skips, and O(dependents) when a stage
    starts or stops satisfying them); O(stages) for a cancel."""
    match event:
        case CancelRequested(at):
            return _cancel(state, at)
        case Launched(name, job_id, at):
            stage = _known(state, name)
            if stage.phase is not StagePhase.PENDING:
                return Outcome(state)
            queued = replace(stage, phase=StagePhase.QUEUED, job_id=job_id, reason=None)
            return _settle(state, queued, at)
        case Waiting(name, reason):
            stage = _known(state, name)
            if stage.phase is not StagePhase.PENDING or stage.reason == reason:
                return Outcome(state)
            state.tables.put(replace(stage, reason=reason))
            return Outcome(state._next(), frozenset({name}))
        case LaunchFailed(name, error, at):
            stage = _known(state, name)
            if stage.phase is not StagePhase.PENDING:
                return Outcome(state)
            failed = replace(stage, phase=StagePhase.FAILED, error=error, reason=None)
            return _settle(state, failed, at)
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
            return _settle(state, changed, at)
    raise TypeError(f"not a pipeline event: {event!r}")  # pragma: no cover


def launchable(state: PipelineState, limit: int | None = None) -> list[str]:
    """The pending stages whose needs are all satisfied, in submitted order (the first
    ``limit`` of them); none once the run is over (cancelled). O(ready), not O(stages)."""
    if state.status.terminal:
        return []
    t = state.tables
    if limit is not None and limit < len(t.ready):
        return heapq.nsmallest(limit, t.ready, key=t.order.__getitem__)
    return sorted(t.ready, key=t.order.__getitem__)


class NotRetryable(ValueError):
    """Why the run cannot be retried now (a 409 for the caller)."""


def retry(state: PipelineState, at: int) -> Outcome:
    """Re-run what did not succeed, and what needs it; raise NotRetryable when the run is
    not over, a stage job is still ending, or every stage succeeded."""
    if not state.status.terminal:
        raise NotRetryable(f"the run is {state.status.value}; retry it once it has ended")
    if state.live:
        raise NotRetryable("stage jobs of the run are still ending; retry in a moment")
    t = state.tables
    again = [
        s.name
        for s in t.by_name.values()
        if s.phase.terminal and s.phase is not StagePhase.SUCCEEDED
    ]
    if not again:
        raise NotRetryable("every stage succeeded: there is nothing to retry")
    marked = set(again)
    for name in again:  # and every stage that needs one of them, transitively
        for d in t.dependents[name]:
            if d not in marked:
                marked.add(d)
                again.append(d)
    for name in again:
        stage = t.by_name[name]
        t.put(
            replace(
                stage,
                phase=StagePhase.PENDING,
                job_id=None,
                error=None,
                reason=None,
                final_metrics={},
                retry=stage.retry + 1,
            )
        )
    after = state._next(
        status=Status.RUNNING,  # its earlier jobs exist: it started when it first did
        finished_at=None,
        retries=state.retries + 1,
    )
    return Outcome(after, frozenset(marked), True)


def initial(stages: Iterable[Stage]) -> PipelineState:
    return PipelineState(Status.PENDING, tuple(stages))


# helpers --------------------------------------------------------------------------------


def _known(state: PipelineState, name: str) -> Stage:
    try:
        return state.stage(name)
    except KeyError:
        raise UnknownStage(f"the pipeline has no stage {name!r}") from None


def _settle(state: PipelineState, update: Stage, at: int) -> Outcome:
    """Apply ``update``, skip what can no longer run, and end the run when nothing can."""
    t = state.tables
    blocked = update.blocks and not t.by_name[update.name].blocks
    t.put(update)
    changed = {update.name}
    if blocked:
        _skip_blocked(t, update.name, changed)
    status, started, finished = state.status, state.started_at, state.finished_at
    if status is Status.PENDING and t.with_job:
        status, started = Status.RUNNING, at
    terminal = sum(t.phases[p] for p in _TERMINAL_STAGE)
    if not status.terminal and terminal == len(t.by_name):
        status, finished = _final(t), at
    after = state._next(status=status, started_at=started, finished_at=finished)
    run_changed = (status, started, finished) != (
        state.status,
        state.started_at,
        state.finished_at,
    )
    return Outcome(after, frozenset(changed), run_changed)


def _skip_blocked(t: _Tables, blocker: str, changed: set[str]) -> None:
    """The pending stages that need ``blocker`` (which blocks) become ``skipped``,
    transitively; each names the first of its needs that blocks once the skipping is done
    (its needs in their order)."""
    skipped: list[str] = []
    todo = [blocker]
    while todo:
        for d in t.dependents[todo.pop()]:
            stage = t.by_name[d]
            if stage.phase is StagePhase.PENDING:
                t.put(replace(stage, phase=StagePhase.SKIPPED, reason=None, error=None))
                skipped.append(d)
                todo.append(d)
    for name in skipped:
        stage = t.by_name[name]
        first = next(n for n in stage.needs if t.by_name[n].blocks)
        why = _verb(t.by_name[first].phase.value)
        t.put(replace(stage, error=f"skipped: it needs {first!r}, which {why}"))
        changed.add(name)


def _verb(phase: str) -> str:
    return {"failed": "failed", "cancelled": "was cancelled", "skipped": "was skipped"}[phase]


def _final(t: _Tables) -> Status:
    if t.failed_hard:
        return Status.FAILED
    if t.phases[StagePhase.CANCELLED]:
        return Status.CANCELLED
    if t.phases[StagePhase.SKIPPED]:  # only after a failure: defensive
        return Status.FAILED
    return Status.SUCCEEDED


def _cancel(state: PipelineState, at: int) -> Outcome:
    if state.status.terminal:
        return Outcome(state)
    t = state.tables
    changed: list[str] = []
    kill: list[str] = []
    for stage in list(t.by_name.values()):
        if stage.phase is StagePhase.PENDING:
            t.put(
                replace(
                    stage,
                    phase=StagePhase.CANCELLED,
                    reason=None,
                    error="the pipeline was cancelled",
                )
            )
            changed.append(stage.name)
        elif stage.phase.live and stage.job_id is not None:
            kill.append(stage.job_id)
    after = state._next(status=Status.CANCELLED, finished_at=at)
    return Outcome(after, frozenset(changed), True, tuple(kill))
