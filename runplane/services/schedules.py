"""Schedules (docs/schedules.md): create, change, list, delete, and the scheduler actor's
``fire``, which creates one occurrence's job or pipeline run as the schedule's creator.

Create and PATCH check everything a submit would (the timing, the body through the jobs
or pipelines service's validation) and store the body with secret-looking plain env
values sealed; then they poke the scheduler, which reads the row again. ``fire`` re-checks
the creator's right to submit (a revoked token, a removed member: an error on the run,
nothing created), applies the concurrency policy, and submits through the normal path
(quota and admission apply; a refusal is recorded on the run, never lost).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pydantic import ValidationError

from runplane import sealed_env, vault
from runplane.actors.scheduler import Fired, Poke, SchedulerMsg
from runplane.auth import identity, tokens
from runplane.auth.roles import bundle, has_scope
from runplane.ids import derived_id, new_id
from runplane.jobs import repo as jobs_repo
from runplane.persistence import Store, now_ms
from runplane.pipelines import repo as pipelines_repo
from runplane.pipelines.body import PipelineBody
from runplane.policy.refusal import AdmissionRefused
from runplane.problems import FieldProblem, Problem, not_found
from runplane.runs.spec import RunSpecBody
from runplane.runtime import ActorError, ActorRef
from runplane.schedules import repo, timing
from runplane.schedules.body import MAX_PER_ORG, ScheduleBody, SchedulePatch
from runplane.schedules.repo import ScheduleRow
from runplane.schedules.view import schedule_view
from runplane.services.jobs import Jobs, Submitter
from runplane.services.pipelines import Pipelines

log = logging.getLogger("runplane.schedules")


@dataclass(frozen=True, slots=True)
class Creator:
    """Who creates a schedule, as its fires re-check: the org, the subject, and the
    credential it came with (``none`` open deploy, ``admin``, ``token`` ``tok_...``,
    ``session`` of a user)."""

    org_id: str
    subject: str
    credential: str
    credential_id: str | None = None


def _invalid(key: str, message: str, status: int = 422) -> Problem:
    return Problem(
        status, "invalid_schedule", f"{key}: {message}", [FieldProblem(key, "invalid", message)]
    )


def _prefixed(exc: Problem, prefix: str) -> Problem:
    """A submit's problem about the body, keyed under ``job.`` or ``pipeline.``."""
    errors = [FieldProblem(f"{prefix}.{e.key}".rstrip("."), e.code, e.message) for e in exc.errors]
    return Problem(exc.status, exc.code, f"{prefix}: {exc.detail}", errors)


class Schedules:
    def __init__(
        self,
        store: Store,
        jobs: Jobs,
        pipelines: Pipelines,
        scheduler: Callable[[], ActorRef[SchedulerMsg] | None],
    ) -> None:
        self.store = store
        self.jobs = jobs
        self.pipelines = pipelines
        self._scheduler = scheduler

    # -- commands ---------------------------------------------------------------------------

    async def create(self, body: ScheduleBody, who: Creator, *, origin: str) -> dict[str, Any]:
        if await repo.count(self.store, who.org_id) >= MAX_PER_ORG:
            raise Problem(
                409,
                "too_many_schedules",
                f"the org has {MAX_PER_ORG} schedules, the most it may have; delete one first",
            )
        cron, every_sec = self._timing(body.cron, body.every, body.timezone)
        kind, spec = await self._spec(body.job, body.pipeline, who)
        now = now_ms()
        row = ScheduleRow(
            id=new_id("sch_"),
            org_id=who.org_id,
            name=body.name,
            cron=cron,
            every_sec=every_sec,
            timezone=body.timezone,
            anchor=now,
            kind=kind,
            body={"spec": spec, "origin": origin},
            concurrency=body.concurrency,
            suspend=body.suspend,
            created_by=who.subject,
            credential=who.credential,
            credential_id=who.credential_id,
            created_at=now,
            updated_at=now,
            next_run_at=None,
        )
        row = replace(row, next_run_at=None if body.suspend else row.timing.next_after(now))
        await repo.insert(self.store, row)
        await self._poke(row.id)
        return schedule_view(row, [])

    async def patch(
        self, schedule_id: str, org_id: str | None, body: SchedulePatch
    ) -> dict[str, Any]:
        row = await self._visible(schedule_id, org_id)
        given = body.model_fields_set
        cron, every = row.cron, None
        if "cron" in given or "every" in given or "timezone" in given:
            cron_in = body.cron if "cron" in given else (None if "every" in given else row.cron)
            every_in = (
                body.every
                if "every" in given
                else (None if "cron" in given or row.every_sec is None else f"{row.every_sec}s")
            )
            tz = body.timezone or row.timezone
            cron, every_sec = self._timing(cron_in, every_in, tz)
            row = replace(row, cron=cron, every_sec=every_sec, timezone=tz)
            every = every_sec
        retimed = "cron" in given or "every" in given or "timezone" in given
        who = Submitter(row.org_id, row.created_by)
        if body.job is not None or body.pipeline is not None:
            kind, spec = await self._spec(body.job, body.pipeline, who)
            row = replace(row, kind=kind, body={**row.body, "spec": spec})
        if body.name is not None:
            row = replace(row, name=body.name)
        if body.concurrency is not None:
            row = replace(row, concurrency=body.concurrency)
        now = now_ms()
        resumed = body.suspend is False and row.suspend
        if body.suspend is not None:
            row = replace(row, suspend=body.suspend)
        if row.suspend:
            row = replace(row, next_run_at=None)
        elif retimed or resumed or row.next_run_at is None:
            # from now on: a resume fires no backlog; an interval counts from here
            anchor = now if (resumed or every is not None) else row.anchor
            row = replace(row, anchor=anchor)
            row = replace(row, next_run_at=row.timing.next_after(now))
        row = replace(row, updated_at=now)
        await repo.replace_row(self.store, row)
        await self._poke(row.id)
        return schedule_view(row, await repo.runs(self.store, row.id))

    async def delete(self, schedule_id: str, org_id: str | None) -> ScheduleRow:
        row = await self._visible(schedule_id, org_id)
        await repo.delete(self.store, row.id)
        await self._poke(row.id)
        return row

    # -- reads --------------------------------------------------------------------------------

    async def get(self, schedule_id: str, org_id: str | None) -> dict[str, Any]:
        row = await self._visible(schedule_id, org_id)
        return schedule_view(row, await repo.runs(self.store, row.id))

    async def listing(self, org_id: str | None, *, limit: int, offset: int) -> list[dict[str, Any]]:
        rows = await repo.listing(self.store, org_id, limit=limit, offset=offset)
        return [schedule_view(r) for r in rows]

    # -- the scheduler's fire -------------------------------------------------------------------

    async def fire(self, row: ScheduleRow, due: int, key: str) -> Fired:
        denied = await self._authority(row)
        if denied is not None:
            return Fired("error", status=403, detail=denied)
        live = await self._live(row)
        if live and row.concurrency == "forbid":
            return Fired(
                "skipped", detail=f"{live[0]} of the previous occurrence is still live (forbid)"
            )
        if live and row.concurrency == "replace":
            for ref in live:
                await self._cancel(ref)
        who = Submitter(row.org_id, row.created_by)
        spec = self._opened(row)
        try:
            if row.kind == "job":
                created = await self.jobs.submit(
                    RunSpecBody.model_validate(spec), who, idempotency_key=f"schedule:{key}"
                )
                return Fired("created", ref=created.row.id)
            run_id = derived_id("plr_", due, key)
            view = await self.pipelines.create(
                PipelineBody.model_validate(spec), who, origin=row.body["origin"], run_id=run_id
            )
            return Fired("created", ref=str(view["pipeline_run_id"]))
        except AdmissionRefused as exc:
            return Fired("error", status=429, detail=exc.reason)
        except Problem as exc:
            return Fired("error", status=exc.status, detail=exc.detail)
        except ValidationError as exc:  # a body stored before a change of the model
            return Fired("error", status=422, detail=str(exc).splitlines()[0])

    # -- helpers ------------------------------------------------------------------------------

    def _timing(
        self, cron: str | None, every: str | None, tz: str
    ) -> tuple[str | None, int | None]:
        if (cron is None) == (every is None):
            raise _invalid("cron", "give exactly one of cron (5 fields) and every (like 30s)")
        try:
            timing.zone(tz)
        except ValueError as exc:
            raise _invalid("timezone", str(exc)) from None
        if cron is not None:
            try:
                return timing.check_cron(cron), None
            except ValueError as exc:
                raise _invalid("cron", str(exc)) from None
        assert every is not None
        try:
            return None, timing.parse_every(every)
        except ValueError as exc:
            raise _invalid("every", str(exc)) from None

    async def _spec(
        self, job: RunSpecBody | None, pipeline: PipelineBody | None, who: Submitter | Creator
    ) -> tuple[str, dict[str, Any]]:
        """The kind and the stored body (checked as a submit would check it, secret-looking
        plain env values sealed)."""
        if (job is None) == (pipeline is None):
            raise _invalid("job", "give exactly one of job (a RunSpec) and pipeline")
        submitter = Submitter(who.org_id, who.subject)
        if job is not None:
            try:
                dry = await self.jobs.dry_run(job, submitter)
            except Problem as exc:
                raise _prefixed(exc, "job") from None
            if dry.errors:
                errors = [FieldProblem(f"job.{e.key}", e.code, e.message) for e in dry.errors]
                raise Problem(
                    422,
                    "invalid_schedule",
                    f"job.{dry.errors[0].key}: {dry.errors[0].message}",
                    errors,
                )
            stored = job.model_dump(mode="json", exclude_unset=True)
            try:
                await vault.check_refs(self.store, vault.doc_references(stored), who.org_id)
            except Problem as exc:
                raise _prefixed(exc, "job") from None
            return "job", sealed_env.sealed_doc(stored, self.jobs.sealer, who.org_id)
        assert pipeline is not None
        try:
            await self.pipelines.validate(pipeline, submitter)
        except Problem as exc:
            raise _prefixed(exc, "pipeline") from None
        stored = pipeline.model_dump(mode="json", exclude_unset=True)
        for stage in stored["stages"]:
            try:
                await vault.check_refs(self.store, vault.doc_references(stage), who.org_id)
            except Problem as exc:
                raise _prefixed(exc, f"pipeline.stages.{stage.get('name', '')}") from None
        stored["stages"] = [
            sealed_env.sealed_doc(s, self.jobs.sealer, who.org_id) for s in stored["stages"]
        ]
        return "pipeline", stored

    def _opened(self, row: ScheduleRow) -> dict[str, Any]:
        stored = row.body["spec"]
        if row.kind == "job":
            return sealed_env.opened_doc(stored, self.jobs.sealer, row.org_id)[0]
        return {
            **stored,
            "stages": [
                sealed_env.opened_doc(s, self.jobs.sealer, row.org_id)[0] for s in stored["stages"]
            ],
        }

    async def _authority(self, row: ScheduleRow) -> str | None:
        """Why the creator may no longer submit in the schedule's org, or None."""
        if row.credential == "token" and row.credential_id:
            token = await tokens.get_token(self.store, row.credential_id)
            if token is None or token.revoked:
                return (
                    f"access token {row.credential_id}, which created the schedule, was "
                    "revoked; recreate the schedule with a live token"
                )
            if not has_scope(token.scopes, "runs:submit"):
                return f"access token {row.credential_id} does not hold runs:submit"
        elif row.credential == "session":
            role = await identity.member_role(self.store, row.org_id, row.created_by)
            if role is None:
                return f"{row.created_by}, who created the schedule, is no longer a member"
            if not has_scope(bundle(role), "runs:submit"):
                return f"{row.created_by}'s role {role!r} no longer allows submitting runs"
        return None

    async def _live(self, row: ScheduleRow) -> list[str]:
        """The runs an earlier occurrence created that are still live (newest first)."""
        refs = [
            r.ref for r in await repo.runs(self.store, row.id) if r.outcome == "created" and r.ref
        ]
        runs = [ref for ref in refs if ref.startswith("plr_")]
        jobs = [ref for ref in refs if not ref.startswith("plr_")]
        live = await pipelines_repo.live_among(self.store, runs)
        live |= await jobs_repo.live_among(self.store, jobs)
        return [ref for ref in refs if ref in live]

    async def _cancel(self, ref: str) -> None:
        if ref.startswith("plr_"):
            await self.pipelines.cancel(ref, None)
        else:
            await self.jobs.cancel(ref, None)

    async def _visible(self, schedule_id: str, org_id: str | None) -> ScheduleRow:
        row = await repo.get(self.store, schedule_id, org_id)
        if row is None:
            raise not_found("schedule")
        return row

    async def _poke(self, schedule_id: str) -> None:
        ref = self._scheduler()
        if ref is None:
            return
        try:
            await ref.tell(Poke(schedule_id))
        except ActorError as exc:  # it rebuilds from the store when it starts
            log.warning(
                "scheduler not poked", extra={"schedule_id": schedule_id, "error": str(exc)}
            )
