"""The pipeline actor: one per live pipeline run, driving its state machine
(``runplane/pipelines/machine.py``).

It learns its stage jobs' phases from their job actors (a ``JobPhase`` message per
transition, never by polling), writes its transitions to the store in batches (see
``_record``: the store is where they become visible; create and cancel answer after the
write), launches the stages whose needs are met as normal admitted jobs, each with
``{{stages.<name>.job_id}}`` resolved, and keeps a stage the quota refuses pending with the
reason, trying again every :data:`QUOTA_RETRY_SEC` and whenever one of its own stages ends.

A wave (the stages ready at once) is created like a job array, in chunks of
:data:`WAVE_CHUNK`: each chunk's jobs admitted per job and inserted in one transaction
(``PipelineDeps.launch``). Between chunks the actor serves its mailbox (the next chunk is
an ``Advance`` it tells itself, queued behind what arrived meanwhile), so a ``Cancel``
waits for at most the chunk in hand, never the whole wave, and the cancelled run
launches nothing more. The mailbox is FIFO (``runplane/runtime``): no message jumps the
queue, but every message other than a chunk is O(1) work (``machine.py``).

Started again (a crash, a server restart, a late message after passivation) it rebuilds
from the store: the stage rows, then the jobs carrying its id, whose phases win (a job
created or finished just before a crash is adopted, never launched twice). It passivates
once the run is over and no stage job is live. A ``Retry`` (the run over) re-runs what
did not succeed (``machine.retry``): written before it answers, then launched.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, assert_never

import trio

from runplane.persistence import Store, now_ms
from runplane.pipelines import repo
from runplane.pipelines.machine import (
    CancelRequested,
    Event,
    JobPhase,
    Launched,
    LaunchFailed,
    NotRetryable,
    Outcome,
    PipelineState,
    Status,
    Waiting,
    launchable,
    retry,
    transition,
)
from runplane.pipelines.refs import resolve
from runplane.runtime import Actor, ActorKind, Asks

log = logging.getLogger("runplane.pipelines")

#: Seconds between tries of a stage the quota refused (also tried when a stage ends).
QUOTA_RETRY_SEC = 1.0
#: Stage jobs created per transaction; the mailbox is served between chunks (a cancel
#: during a wave waits for one chunk at most, and kills at most what was created: about
#: 1 ms per stage job on the 2-core development machine, so 50 keeps it well under 100 ms).
WAVE_CHUNK = 50


@dataclass(frozen=True, slots=True)
class Launch:
    """What the actor asks the jobs side to create for one stage."""

    run: repo.RunRow
    stage: str
    body: dict[str, Any]  # the stage's RunSpec body, references resolved
    retry: int = 0  # the stage's retry (its job's ``stage_retry``)


class Refused(Exception):
    """``launch`` could not create the stage's job now (quota): the stage waits with
    ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Invalid(Exception):
    """``launch`` can never create the stage's job (its body does not validate): the stage
    fails."""


#: What ``launch`` answers per stage: its new job's id, or why it has none.
LaunchResult = str | Refused | Invalid


@dataclass(frozen=True, slots=True)
class PipelineDeps:
    store: Store
    #: create the stages' jobs in one transaction, each admitted on its own (a stage the
    #: quota refuses and every one after it: Refused); one result per launch, in order
    launch: Callable[[Sequence[Launch]], Awaitable[list[LaunchResult]]]


@dataclass(frozen=True, slots=True)
class Advance:
    """Launch the next chunk of what can run now (told to self after a start, after a
    chunk when more is ready, and by the quota retry timer: ``timer``)."""

    timer: bool = False


@dataclass(frozen=True, slots=True)
class Launching(Asks[bool]):
    """Answered once everything queued before it was handled: whether stages that can
    run are still waiting for their chunk (create and retry ask until not, or time out)."""


@dataclass(frozen=True, slots=True)
class Cancel(Asks[tuple[str, ...]]):
    """Cancel the run: answers the ids of the stage jobs to kill on their nodes."""


@dataclass(frozen=True, slots=True)
class Retry(Asks[str | None]):
    """Re-run the stages of the ended run that did not succeed, and their dependents:
    answers None once that is written, else why it cannot (``NotRetryable``)."""


@dataclass(frozen=True, slots=True)
class Sync(Asks[Status]):
    """Answered once everything queued before it was handled: the run's status."""


PipelineMsg = JobPhase | Advance | Cancel | Retry | Sync | Launching

#: The pipeline actors, one per live run, addressed by pipeline run id.
PIPELINES = ActorKind[PipelineMsg]("pipeline")


class PipelineActor(Actor[PipelineMsg]):
    def __init__(self, deps: PipelineDeps, run: repo.RunRow, stages: list[repo.StageRow]) -> None:
        self.deps = deps
        self.run = run
        self.bodies = {s.stage.name: s.body for s in stages}
        self.state = PipelineState(
            run.status,
            tuple(s.stage for s in stages),
            started_at=run.started_at,
            finished_at=run.finished_at,
            retries=run.retries,
        )
        self._retry: trio.CancelScope | None = None
        #: what changed since the last write: stage names, and whether the run's own row
        self._dirty: set[str] = set()
        self._dirty_run = False
        self._written_status = run.status
        self._wake = trio.Event()
        self._writing = trio.Lock()
        #: an Advance is queued: the next chunk is coming, JobPhase launches nothing
        self._chunk_queued = False

    async def on_start(self) -> None:
        """Adopt what the stage jobs say (the store's word over the stage rows), then
        launch what can run."""
        jobs = await repo.stage_jobs(self.deps.store, self.run.id)
        for j in jobs:
            if j["stage"] in self.state.index:
                found = JobPhase(
                    j["stage"],
                    j["id"],
                    j["phase"],
                    now_ms(),
                    j["error"],
                    j["final_metrics"],
                    j["stage_retry"],
                )
                self._record(transition(self.state, found))
        await self._write()
        self.context.start_soon(self._writer)
        if not self.state.status.terminal:
            self._next_chunk()

    async def on_stop(self) -> None:
        await self._write()

    def can_passivate(self) -> bool:
        idle = not self._dirty and not self._dirty_run
        return idle and self.state.status.terminal and not self.state.live

    async def handle(self, msg: PipelineMsg) -> object:
        match msg:
            case JobPhase():
                outcome = transition(self.state, msg)
                self._record(outcome)
                ended = any(outcome.state.stage(n).phase.terminal for n in outcome.changed)
                if ended and not self._chunk_queued:
                    await self._advance()
                return None
            case Advance(timer):
                if timer:
                    self._retry = None
                else:
                    self._chunk_queued = False
                await self._advance()
                return None
            case Launching():
                return self._chunk_queued
            case Cancel():
                outcome = transition(self.state, CancelRequested(now_ms()))
                self._record(outcome)
                await self._write()  # durable before the caller kills the stage jobs
                return outcome.kill
            case Retry():
                try:
                    outcome = retry(self.state, now_ms())
                except NotRetryable as exc:
                    return str(exc)
                self._record(outcome)
                await self._write()  # durable before the caller hears it is retried
                log.info(
                    "pipeline retried",
                    extra={"pipeline_run_id": self.run.id, "stages": sorted(outcome.changed)},
                )
                self._next_chunk()
                return None
            case Sync():
                await self._write()
                return self.state.status
            case _:
                assert_never(msg)

    # -- transitions and their writes ---------------------------------------------------
    #
    # A transition takes effect in memory at once and is written behind, in batches: the
    # writer task writes everything that changed since its last write in one transaction
    # (a 1,000-stage fan-out's few thousand phase reports are a handful of commits, not
    # one each). Nothing is lost by a crash in between: the stage phases come back from
    # the jobs at the rebuild. Answers that promise something (create, cancel) wait for
    # the write (``Sync``, ``Cancel``).

    def _record(self, outcome: Outcome) -> None:
        self.state = outcome.state
        self._dirty |= outcome.changed
        self._dirty_run = self._dirty_run or outcome.run_changed
        if self._dirty or self._dirty_run:
            self._wake.set()

    async def _writer(self) -> None:
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            await self._write()

    async def _write(self) -> None:
        async with self._writing:
            if not self._dirty and not self._dirty_run:
                return
            state, changed = self.state, sorted(self._dirty)
            self._dirty, self._dirty_run = set(), False
            progress = state.progress()
            await self.deps.store.transaction(repo.save(self.run.id, state, changed, progress))
        if state.status is not self._written_status:
            log.info(
                "pipeline status",
                extra={
                    "pipeline_run_id": self.run.id,
                    "from": self._written_status.value,
                    "to": state.status.value,
                    "progress": progress,
                },
            )
            self._written_status = state.status

    # -- launching ----------------------------------------------------------------------

    def _next_chunk(self) -> None:
        if not self._chunk_queued:
            self._chunk_queued = True
            self.context.ref.try_tell(Advance())

    async def _advance(self) -> None:
        """Launch the first chunk of what can run now (one transaction); queue an Advance
        for the next one when more can run."""
        ready = launchable(self.state, WAVE_CHUNK)
        if not ready:
            return
        state = self.state
        bodies = [self._body(state, name) for name in ready]
        launches = [
            Launch(self.run, name, body, state.stage(name).retry)
            for name, body in zip(ready, bodies, strict=True)
        ]
        results = await self.deps.launch(launches)
        refused = next((r.reason for r in results if isinstance(r, Refused)), None)
        for name, result in zip(ready, results, strict=True):
            self._record(transition(self.state, self._event(name, result)))
        if refused is not None:  # the rest of the wave waits with the same reason
            for name in launchable(self.state):
                self._record(transition(self.state, Waiting(name, refused)))
            if self._retry is None:
                self._retry = self.context.tell_after(QUOTA_RETRY_SEC, Advance(timer=True))
        elif launchable(self.state, 1):  # the rest of the wave, or a failed launch's dependents
            self._next_chunk()

    def _body(self, state: PipelineState, name: str) -> dict[str, Any]:
        def job_of(stage: str) -> str:
            return state.stage(stage).job_id or ""

        return resolve(self.bodies[name], job_of, self.run.origin)

    def _event(self, name: str, result: LaunchResult) -> Event:
        if isinstance(result, Refused):
            return Waiting(name, result.reason)
        if isinstance(result, Invalid):
            log.warning(
                "pipeline stage not launched",
                extra={"pipeline_run_id": self.run.id, "stage": name, "error": str(result)},
            )
            return LaunchFailed(name, f"could not launch: {result}", now_ms())
        return Launched(name, result, now_ms())
