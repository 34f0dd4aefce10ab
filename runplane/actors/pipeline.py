"""The pipeline actor: one per live pipeline run, driving its state machine
(``runplane/pipelines/machine.py``).

It learns its stage jobs' phases from their job actors (a ``JobPhase`` message per
transition, never by polling), writes every transition to the store before it acts on
it, launches the stages whose needs are met as normal admitted jobs (concurrently, each
with ``{{stages.<name>.job_id}}`` resolved), and keeps a stage the quota refuses pending
with the reason, trying again every :data:`QUOTA_RETRY_SEC` and whenever one of its own
stages ends. Started again (a crash, a server restart, a late message after passivation)
it rebuilds from the store: the stage rows, then the jobs carrying its id, whose phases
win (a job created or finished just before a crash is adopted, never launched twice).
It passivates once the run is over and no stage job is live.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from runplane.persistence import Store, now_ms
from runplane.pipelines import repo
from runplane.pipelines.machine import (
    CancelRequested,
    Event,
    JobPhase,
    Launched,
    LaunchFailed,
    Outcome,
    PipelineState,
    Status,
    Waiting,
    launchable,
    transition,
)
from runplane.pipelines.refs import resolve
from runplane.runtime import Actor, ActorKind, Asks

log = logging.getLogger("runplane.pipelines")

#: Seconds between tries of a stage the quota refused (also tried when a stage ends).
QUOTA_RETRY_SEC = 1.0
#: Stages launched at once (their admissions and inserts overlap; the store batches them).
LAUNCH_CONCURRENCY = 64


@dataclass(frozen=True, slots=True)
class Launch:
    """What the actor asks the jobs side to create for one stage."""

    run: repo.RunRow
    stage: str
    body: dict[str, Any]  # the stage's RunSpec body, references resolved


class Refused(Exception):
    """``launch`` could not create the job now (quota): the stage waits with ``reason``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class Invalid(Exception):
    """``launch`` can never create the job (its body does not validate): the stage fails."""


@dataclass(frozen=True, slots=True)
class PipelineDeps:
    store: Store
    #: create the stage's job; returns its id, raises Refused or Invalid
    launch: Callable[[Launch], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Advance:
    """Launch what can run now (sent to self after a start and by the retry timer)."""


@dataclass(frozen=True, slots=True)
class Cancel(Asks[tuple[str, ...]]):
    """Cancel the run: answers the ids of the stage jobs to kill on their nodes."""


@dataclass(frozen=True, slots=True)
class Sync(Asks[Status]):
    """Answered once everything queued before it was handled: the run's status."""


PipelineMsg = JobPhase | Advance | Cancel | Sync

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
        )
        self._retry: trio.CancelScope | None = None

    async def on_start(self) -> None:
        """Adopt what the stage jobs say (the store's word over the stage rows), then
        launch what can run."""
        jobs = await repo.stage_jobs(self.deps.store, self.run.id)
        await self._apply_all(
            [
                JobPhase(j["stage"], j["id"], j["phase"], now_ms(), j["error"], j["final_metrics"])
                for j in jobs
                if j["stage"] in self.state.index
            ]
        )
        if not self.state.status.terminal:
            self.context.ref.try_tell(Advance())

    def can_passivate(self) -> bool:
        return self.state.status.terminal and not any(s.phase.live for s in self.state.stages)

    async def handle(self, msg: PipelineMsg) -> object:
        match msg:
            case JobPhase():
                ended = await self._apply(msg)
                if ended:
                    await self._advance()
                return None
            case Advance():
                self._retry = None
                await self._advance()
                return None
            case Cancel():
                outcome = await self._apply_outcome(CancelRequested(now_ms()))
                return outcome.kill
            case Sync():
                return self.state.status
        raise TypeError(f"not a pipeline message: {msg!r}")  # pragma: no cover

    # -- transitions --------------------------------------------------------------------

    async def _apply(self, event: Event) -> bool:
        """Apply one event; True when it ended a stage (something may be launchable)."""
        outcome = await self._apply_outcome(event)
        return any(outcome.state.stage(n).phase.terminal for n in outcome.changed)

    async def _apply_outcome(self, event: Event) -> Outcome:
        outcome = transition(self.state, event)
        await self._save(outcome)
        return outcome

    async def _apply_all(self, events: list[Event]) -> None:
        """Apply ``events`` in order and write what they changed in one transaction."""
        state, changed, run_changed = self.state, set[str](), False
        for event in events:
            outcome = transition(state, event)
            state = outcome.state
            changed |= outcome.changed
            run_changed = run_changed or outcome.run_changed
        await self._save(Outcome(state, frozenset(changed), run_changed))

    async def _save(self, outcome: Outcome) -> None:
        if not outcome.changed and not outcome.run_changed:
            return
        before = self.state.status
        await self.deps.store.transaction(
            repo.save(self.run.id, outcome.state, sorted(outcome.changed))
        )
        self.state = outcome.state
        if self.state.status is not before:
            log.info(
                "pipeline status",
                extra={
                    "pipeline_run_id": self.run.id,
                    "from": before.value,
                    "to": self.state.status.value,
                    "progress": self.state.progress(),
                },
            )

    # -- launching ----------------------------------------------------------------------

    async def _advance(self) -> None:
        ready = launchable(self.state)
        if not ready:
            return
        events: list[Event] = []
        refused: list[str] = []  # the first quota refusal stops further launches

        async def one(name: str, limiter: trio.CapacityLimiter) -> None:
            async with limiter:
                if refused:
                    events.append(Waiting(name, refused[0]))
                    return
                events.append(await self._launch(name, refused))

        limiter = trio.CapacityLimiter(LAUNCH_CONCURRENCY)
        async with trio.open_nursery() as nursery:
            for name in ready:
                nursery.start_soon(one, name, limiter)
        await self._apply_all(events)  # one write for the whole wave
        if refused and self._retry is None:
            self._retry = self.context.tell_after(QUOTA_RETRY_SEC, Advance())
        if any(isinstance(e, LaunchFailed) for e in events):
            await self._advance()  # a failed launch may make dependents skip, or run

    async def _launch(self, name: str, refused: list[str]) -> Event:
        state = self.state

        def job_of(stage: str) -> str:
            return state.stage(stage).job_id or ""

        body = resolve(self.bodies[name], job_of, self.run.origin)
        try:
            job_id = await self.deps.launch(Launch(self.run, name, body))
        except Refused as exc:
            refused.append(exc.reason)
            return Waiting(name, exc.reason)
        except Invalid as exc:
            log.warning(
                "pipeline stage not launched",
                extra={"pipeline_run_id": self.run.id, "stage": name, "error": str(exc)},
            )
            return LaunchFailed(name, f"could not launch: {exc}", now_ms())
        return Launched(name, job_id, now_ms())
