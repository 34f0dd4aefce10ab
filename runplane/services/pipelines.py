"""The pipelines service: what the pipeline routes call (``docs/pipelines.md``).

``check`` does every validation a submit needs before anything is enqueued: the topology
(``runplane/pipelines/dag.py``: 400) and each stage as a dry run of its RunSpec body under
the caller's policy (``Jobs.dry_run``: 422), with each ``{{stages.<name>.job_id}}``
standing for a well-formed job id. ``create`` writes the run and its stages in one
transaction, then activates its actor (``runplane/actors/pipeline.py``), which launches
the root stages; ``cancel`` has the actor cancel the run, then kills the live stage jobs
through the jobs service (outside the actor, which keeps taking their phase reports).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import trio
from pydantic import ValidationError

from runplane import sealed_env
from runplane.actors.job_messages import JOBS
from runplane.actors.job_messages import Cancel as JobCancel
from runplane.actors.pipeline import (
    PIPELINES,
    Cancel,
    Launch,
    Launching,
    LaunchResult,
    PipelineActor,
    PipelineDeps,
    Retry,
    Sync,
)
from runplane.ids import new_id
from runplane.jobs.transitions import JobTransitioned, Transitions
from runplane.persistence import Store, now_ms, to_json
from runplane.pipelines import dag, repo
from runplane.pipelines.body import PipelineBody, PipelineStageBody
from runplane.pipelines.machine import JobPhase
from runplane.pipelines.refs import PLACEHOLDER_JOB_ID, resolve
from runplane.pipelines.view import run_view
from runplane.problems import FieldProblem, Problem, not_found
from runplane.runs import RunProblem, RunSpecBody
from runplane.runtime import ActorError, AskTimeout, Registry
from runplane.services.jobs import Jobs, Submitter
from runplane.services.stage_jobs import launch_wave

log = logging.getLogger("runplane.pipelines")

#: A pipeline actor idle this long once its run is over is passivated.
PIPELINE_IDLE_SEC = 30.0
#: Room for every phase report of a 1,000-stage run at once (job actors never wait on it).
PIPELINE_MAILBOX = 16_384
#: Seconds a create waits for its root stages to launch before answering.
CREATE_WAIT_SEC = 10.0
#: The origin stage refs to /v1/artifacts/ are checked against before the real one is known.
_PROBE_ORIGIN = "http://runplane.invalid"
_STAGE_ONLY = {"name", "needs", "allow_failure"}


@dataclass(frozen=True, slots=True)
class StageCheck:
    name: str
    stack: str
    errors: list[RunProblem]
    warnings: list[RunProblem] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "stack": self.stack,
            "validation": {
                "ok": not self.errors,
                "errors": [p.as_dict() for p in self.errors],
                "warnings": [p.as_dict() for p in self.warnings],
            },
        }


@dataclass(frozen=True, slots=True)
class Checked:
    topology: dag.Topology
    stages: list[StageCheck]

    @property
    def ok(self) -> bool:
        return self.topology.ok and all(not s.errors for s in self.stages)

    def as_dict(self) -> dict[str, Any]:
        """The answer of POST /v1/pipelines/validate."""
        return {
            "ok": self.ok,
            "errors": [p.as_dict() for p in self.topology.problems],
            "stages": [s.as_dict() for s in self.stages],
        }


def stage_payload(stage: PipelineStageBody, project: str) -> dict[str, Any]:
    """The stage's RunSpec body as stored (fields it set; the pipeline's project when it
    names none)."""
    payload = stage.model_dump(mode="json", exclude_unset=True, exclude=_STAGE_ONLY)
    if not stage.project and project:
        payload["project"] = project
    return payload


def _problems(exc: ValidationError) -> list[RunProblem]:
    return [
        RunProblem(".".join(str(p) for p in e["loc"]) or "(body)", "invalid", e["msg"])
        for e in exc.errors()
    ]


class Pipelines:
    def __init__(self, store: Store, jobs: Jobs, registry: Registry) -> None:
        self.store = store
        self.jobs = jobs
        self.registry = registry

    def register(self, transitions: Transitions) -> None:
        """The pipeline actors, and their stage jobs' transitions told to them."""
        transitions.subscribe(self.stage_changed)

        async def launch(launches: Sequence[Launch]) -> list[LaunchResult]:
            return await launch_wave(self.jobs, launches)

        deps = PipelineDeps(store=self.store, launch=launch)

        async def activate(run_id: str) -> PipelineActor:
            run = await repo.get_run(self.store, run_id, None)
            if run is None:
                raise LookupError(f"pipeline run {run_id} has no row")
            return PipelineActor(deps, run, await repo.get_stages(self.store, run_id))

        self.registry.register(
            PIPELINES,
            activate,
            idle_timeout=PIPELINE_IDLE_SEC,
            mailbox_capacity=PIPELINE_MAILBOX,
        )

    async def recover(self) -> int:
        """At start-up: every run not over gets its actor back (it rebuilds from the store
        and goes on where the run was)."""
        ids = await repo.live_ids(self.store)
        for run_id in ids:
            await self.registry.get(PIPELINES, run_id)
        return len(ids)

    async def stage_changed(self, moved: JobTransitioned) -> None:
        """A stage job's phase changed (a job transitions' subscriber): tell its pipeline
        actor. If it cannot take it (the server is stopping, the actor failed to start)
        nothing is lost: the actor reads its stage jobs' phases from the store when it
        starts."""
        row = moved.row
        if not moved.changed or row.pipeline_run_id is None or row.stage is None:
            return
        metrics = dict(moved.final_metrics)
        phase, error = moved.phase.value, moved.error
        event = JobPhase(row.stage, row.id, phase, now_ms(), error, metrics, row.stage_retry)
        try:
            await self.registry.tell(PIPELINES, row.pipeline_run_id, event)
        except (ActorError, LookupError) as exc:
            log.warning(
                "stage phase not told to its pipeline (read back when it starts)",
                extra={"pipeline_run_id": row.pipeline_run_id, "job_id": row.id, "error": str(exc)},
            )

    # -- validation -----------------------------------------------------------------------

    async def check(self, body: PipelineBody, who: Submitter, *, stages: bool = True) -> Checked:
        topology = dag.check(body.stages)
        if not stages:
            return Checked(topology, [])
        return Checked(topology, await self._check_stages(body, who))

    async def _check_stages(self, body: PipelineBody, who: Submitter) -> list[StageCheck]:
        """Each stage's dry run; stages with the same body (a fan-out of one stage many
        times) are checked once: the same body under the same caller checks the same."""
        seen: dict[str, StageCheck] = {}
        out = []
        for stage in body.stages:
            probe = resolve(
                stage_payload(stage, body.project), lambda _: PLACEHOLDER_JOB_ID, _PROBE_ORIGIN
            )
            key = to_json(probe)
            if key not in seen:
                seen[key] = await self._check_stage(stage, probe, who)
            out.append(replace(seen[key], name=stage.name))
        return out

    async def _check_stage(
        self, stage: PipelineStageBody, probe: dict[str, Any], who: Submitter
    ) -> StageCheck:
        try:
            run_body = RunSpecBody.model_validate(probe)
        except ValidationError as exc:
            return StageCheck(stage.name, stage.stack, _problems(exc))
        try:
            dry = await self.jobs.dry_run(run_body, who)
        except Problem as exc:  # an unknown stack: a stage failure here, not a 400
            errors = [RunProblem(e.key, e.code, e.message) for e in exc.errors]
            return StageCheck(
                stage.name, stage.stack, errors or [RunProblem("", exc.code, exc.detail)]
            )
        return StageCheck(stage.name, stage.stack, dry.errors, dry.warnings)

    # -- commands -------------------------------------------------------------------------

    async def create(
        self, body: PipelineBody, who: Submitter, *, origin: str, run_id: str | None = None
    ) -> dict[str, Any]:
        """Validate everything (400 topology, 422 a stage), then write the run and start its
        actor, which launches the root stages. The PipelineRun with its stages. With
        ``run_id`` (a schedule's occurrence) a run of that id that exists already is
        answered as it is: created once, however often asked."""
        if run_id is not None and await repo.get_run(self.store, run_id, None) is not None:
            return await self.view(run_id, None)
        await self.validate(body, who)
        run = repo.NewRun(
            id=run_id or new_id("plr_"),
            org_id=who.org_id,
            project=body.project,
            name=body.name,
            submitted_by=who.subject,
            origin=origin,
            # a stage's secret-looking plain env values are stored sealed, as a job's are
            stages=[
                (
                    s.name,
                    list(s.needs),
                    s.allow_failure,
                    s.stack,
                    sealed_env.sealed_doc(
                        stage_payload(s, body.project), self.jobs.sealer, who.org_id
                    ),
                )
                for s in body.stages
            ],
        )
        await self.store.transaction(repo.insert_run(run))
        # answer once the root stages are launched; a very wide first wave that takes
        # longer is answered as it stands (the run exists: an error here would invite a
        # retry that creates it twice)
        await self._launched(run.id)
        return await self.view(run.id, None)

    async def _launched(self, run_id: str) -> None:
        """Wait until every chunk of the wave that can run now is launched and written, at
        most ``CREATE_WAIT_SEC`` (the actor serves other messages between chunks)."""
        deadline = trio.current_time() + CREATE_WAIT_SEC
        with contextlib.suppress(AskTimeout):
            while await self.registry.ask(
                PIPELINES, run_id, Launching(), timeout=max(0.0, deadline - trio.current_time())
            ):
                pass
            left = max(0.0, deadline - trio.current_time())
            await self.registry.ask(PIPELINES, run_id, Sync(), timeout=left)

    async def validate(self, body: PipelineBody, who: Submitter) -> None:
        """What create checks before anything is written: 400 the topology, 422 a stage."""
        checked = await self.check(body, who, stages=False)
        if not checked.topology.ok:
            problems = checked.topology.problems
            raise Problem(
                400,
                "invalid_pipeline",
                problems[0].message
                + ("" if len(problems) == 1 else f" (and {len(problems) - 1} more)"),
                [FieldProblem(p.key, p.code, p.message) for p in problems],
            )
        failed = [
            FieldProblem(f"stages.{result.name}.{p.key}".rstrip("."), p.code, p.message)
            for result in await self._check_stages(body, who)
            for p in result.errors
        ]
        if failed:
            raise Problem(
                422,
                "invalid_stage",
                f"{failed[0].key}: {failed[0].message}"
                + ("" if len(failed) == 1 else f" (and {len(failed) - 1} more)"),
                failed,
            )

    async def cancel(self, run_id: str, org_id: str | None) -> dict[str, Any]:
        if await repo.get_run(self.store, run_id, org_id) is None:
            raise not_found("pipeline run")
        kill = await self.registry.ask(PIPELINES, run_id, Cancel())

        async def one(job_id: str) -> None:
            # straight to the job's actor (as an array's cancel does): the kill list names
            # live jobs of this run, so the jobs service's reads before and after are moot
            await self.registry.ask(JOBS, job_id, JobCancel())

        async with trio.open_nursery() as nursery:
            for job_id in kill:
                nursery.start_soon(one, job_id)
        # the stage jobs told the actor they are cancelled before their cancel returned
        await self.registry.ask(PIPELINES, run_id, Sync())
        return await self.view(run_id, None)

    async def retry(self, run_id: str, org_id: str | None) -> dict[str, Any]:
        """Re-run the ended run's stages that did not succeed and their dependents (409
        when it cannot be retried now); answers once the first wave is launched or
        ``CREATE_WAIT_SEC`` passed, as create does."""
        if await repo.get_run(self.store, run_id, org_id) is None:
            raise not_found("pipeline run")
        refused = await self.registry.ask(PIPELINES, run_id, Retry())
        if refused is not None:
            raise Problem(409, "not_retryable", refused)
        await self._launched(run_id)
        return await self.view(run_id, None)

    # -- reads ----------------------------------------------------------------------------

    async def view(self, run_id: str, org_id: str | None) -> dict[str, Any]:
        run = await repo.get_run(self.store, run_id, org_id)
        if run is None:
            raise not_found("pipeline run")
        return run_view(run, await repo.get_stages(self.store, run_id))

    async def list(self, org_id: str | None, *, limit: int, offset: int) -> list[dict[str, Any]]:
        return [
            run_view(r)
            for r in await repo.list_runs(self.store, org_id, limit=limit, offset=offset)
        ]
