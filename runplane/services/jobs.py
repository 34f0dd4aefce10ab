"""The jobs service: the client functions routes call to create and control jobs.

Submission plans the body (``runplane/runs/resolve.py``: config layers folded, stack and
config checked), passes the admission gate (``runplane/actors/admission.py``: limits
clamped to the caller's ceilings, a quota slot reserved, or ``AdmissionRefused`` which the
HTTP layer answers with 429), writes the job row (with
its Idempotency-Key and ResolvedRun) durably, then hands the job to placement; its actor
activates when placement assigns it (queued jobs are rows, not tasks). Control messages
(cancel, priority) go to the job's actor through the registry; reads come from the store,
which every transition reaches before it is announced.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import trio

from runplane import runs, vault
from runplane.actors import admission as adm
from runplane.actors import placement as pl
from runplane.actors.job import JobActor
from runplane.actors.job_deps import JobDeps
from runplane.actors.job_messages import JOBS, Cancel, CancelOutcome, SetPriority
from runplane.histogram import Histogram
from runplane.ids import new_id
from runplane.jobs import repo
from runplane.jobs.alike import DEMAND_FIELDS, Alike
from runplane.jobs.demand import demand_of
from runplane.jobs.events import JobEvent
from runplane.jobs.follow import JobEventSource, follow
from runplane.jobs.jobspec import JobSpec, PodService, canonical_json, opened, sealed
from runplane.jobs.phase import Phase
from runplane.jobs.rows import JobRow
from runplane.jobs.spec import (
    ResolvedJob,
    SubmitJobBody,
    build,
    default_seed,
    finish,
    raise_issues,
    request_hash,
)
from runplane.persistence import Store
from runplane.placement import DemandError, JobDemand
from runplane.policy import LIMIT_KEYS, Caps
from runplane.policy.refusal import AdmissionRefused
from runplane.problems import FieldProblem, Problem, not_found
from runplane.runtime import ActorRef, AskTimeout, Hub, MailboxFull, Registry
from runplane.sealing import Sealer
from runplane.stacks import Catalog

#: A statement for the new job's row, written in its insert transaction (the audit row).
InTx = Callable[[JobRow], tuple[str, Sequence[Any]]]
#: A terminal job actor idle this long is passivated (its state is all in the store).
log = logging.getLogger("runplane.jobs")

JOB_IDLE_SEC = 30.0
#: How long the answer to a submit waits for placement's wait reason before it goes
#: without one (``wait_reasons(best_effort=True)``).
BEST_EFFORT_ASK_SEC = 1.0


@dataclass(frozen=True, slots=True)
class Submitter:
    org_id: str
    subject: str = ""


class ResolveImage(Protocol):
    async def __call__(self, spec: JobSpec, org_id: str, *, own: bool) -> JobSpec: ...


#: Makes a job's stored ResolvedRun from its admitted spec.
MakeRun = Callable[[JobSpec], dict[str, Any]]


def _demand_key(resolved: ResolvedJob, org_id: str | None) -> tuple[Any, ...]:
    asks = resolved.spec.model_dump(
        mode="json",
        # a demand reads the images too (placement's capability, arch and cache weight)
        include=set(DEMAND_FIELDS),
    )
    return (resolved.priority, org_id, canonical_json(asks))


def _check_placeable(
    resolved: ResolvedJob,
    job_id: str = "check",
    org_id: str | None = None,
    known: Alike | None = None,
) -> JobDemand:
    """The job's placement demand; a 422 Problem when placement cannot read its spec.
    With ``known``, a demand made for the same asks is reused (a copy for this job):
    found by the identity of what it reads, else by its canonical asks."""
    if known is None:
        return _demand(resolved, job_id, org_id)
    ids = known.demand_key(resolved.spec, resolved.priority, org_id)
    demand = known.demand_ids.get(ids)
    if demand is None:
        key = _demand_key(resolved, org_id)
        demand = known.demands.get(key)
        if demand is None:
            demand = known.demands[key] = _demand(resolved, job_id, org_id)
        known.hold(resolved.spec)
        known.demand_ids[ids] = demand
    if demand.job_id == job_id:
        return demand
    return demand.for_job(job_id, job_id)  # ids sort by creation time


def _demand(resolved: ResolvedJob, job_id: str, org_id: str | None) -> JobDemand:
    try:
        return demand_of(job_id, resolved.priority, resolved.spec, org_id)
    except DemandError as exc:
        errors = [FieldProblem(pr.key, pr.code, pr.message) for pr in exc.problems]
        raise Problem(422, "invalid_placement", str(exc), errors) from None


def _finish_alike(
    new: repo.NewJob, limits: dict[str, Any] | None, known_hash: str | None, known: Alike
) -> ResolvedJob:
    """``finish`` for a job of an array, with the array's memo."""
    spec = new.spec
    if limits is not None:
        admitted = known.with_limits(spec, limits)
        if admitted is not spec:
            spec, known_hash = admitted, None
    return ResolvedJob(
        spec=spec,
        spec_hash=known_hash or known.spec_hash(spec),
        priority=new.priority,
        project=new.project,
    )


@dataclass(frozen=True, slots=True)
class Created:
    """A job the gate admitted (or the first job of an Idempotency-Key replay), with the
    admission notes (one per clamped dimension, ``cpu 200->128``; empty on a replay)."""

    row: JobRow
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class DryRun:
    """What POST /v1/runs/validate and /v1/runs/resolve answer: the ResolvedRun the body
    would run as under today's policy, and its validation. Nothing is enqueued."""

    stack: str
    run: dict[str, Any]
    errors: list[runs.RunProblem]
    warnings: list[runs.RunProblem]
    spec_hash: str | None  # when the body is valid

    @property
    def ok(self) -> bool:
        return not self.errors

    def validation(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "errors": [p.as_dict() for p in self.errors],
            "warnings": [p.as_dict() for p in self.warnings],
        }


class Jobs:
    def __init__(
        self,
        store: Store,
        catalog: Catalog,
        registry: Registry,
        placement: ActorRef[pl.PlacementMsg],
        admission: ActorRef[adm.AdmissionMsg],
        hub: Hub,
        sealer: Callable[[], Sealer],
    ) -> None:
        self.store = store
        #: seals a new job's secret-looking plain env values (runplane/sealed_env.py)
        self.sealer = sealer
        self.hub = hub
        self.catalog = catalog
        self.registry = registry
        self.placement = placement
        self.admission = admission
        #: resolves the refs of mounts that name a git connection (the git service's
        #: ``resolve_mounts``: spec, org), set by the root
        self.resolve_git: Callable[[JobSpec, str], Awaitable[JobSpec]] | None = None
        #: resolves the image a job runs in to a digest (the images service's ``resolve``:
        #: spec, org, whether the body named the image), set by the root
        self.resolve_image: ResolveImage | None = None
        #: every submit's seconds (created or refused) and the count of each outcome, for
        #: /metrics (runplane/services/telemetry.py)
        self.submit_seconds = Histogram()
        self.submits: dict[str, int] = {"created": 0, "refused": 0, "invalid": 0}
        #: RUNPLANE_PREEMPT_GRACE_SEC: a preemptible job's grace when it asks for none
        self.preempt_grace_sec = 30

    def register(self, deps: JobDeps) -> None:
        async def activate(job_id: str) -> JobActor:
            row = await repo.get_row(self.store, job_id, None)
            if row is None:
                raise LookupError(f"job {job_id} has no row")
            return JobActor(deps, row)

        self.registry.register(JOBS, activate, idle_timeout=JOB_IDLE_SEC, mailbox_capacity=256)

    async def recover(self) -> int:
        """At start-up: re-activate every job on a node, so its actor takes agent reports
        and control messages at once, and every job waiting out a retry's backoff (its
        timer). Placement rebuilt its queue and reservations itself; a queued job's actor
        activates when placement assigns it (or anyone asks it something)."""
        rows = await repo.live_columns(self.store, "id, phase, retry_at")
        woken = [r for r in rows if r["phase"] != Phase.QUEUED.value or r["retry_at"] is not None]
        for row in woken:
            await self.registry.get(JOBS, row["id"])
        return len(woken)

    async def submit(
        self,
        body: SubmitJobBody,
        who: Submitter,
        *,
        idempotency_key: str | None = None,
        audit: InTx | None = None,
        stage_of: tuple[str, str, int] | None = None,
        session_id: str | None = None,
        pod: list[dict[str, Any]] | None = None,
    ) -> Created:
        """Submit a plain or a layered (RunSpec) body: plan it, then admit and create it.
        ``stage_of`` (pipeline run id, stage name, its retry) tags the job of a pipeline stage;
        ``session_id`` and ``pod`` make the job a session's pod (``audit`` then writes the
        session's row in the job's insert transaction)."""
        began = time.perf_counter()
        outcome = "invalid"
        try:
            created = await self._submit(
                body, who, idempotency_key, audit, stage_of, session_id, pod
            )
            outcome = "created"
            return created
        except AdmissionRefused:
            outcome = "refused"
            raise
        finally:
            self.submit_seconds.observe(time.perf_counter() - began)
            self.submits[outcome] += 1

    async def _submit(
        self,
        body: SubmitJobBody,
        who: Submitter,
        idempotency_key: str | None,
        audit: InTx | None,
        stage_of: tuple[str, str, int] | None,
        session_id: str | None,
        pod: list[dict[str, Any]] | None,
    ) -> Created:
        spec, make_run = await self.plan(body, who, pod)
        return await self._create(
            spec,
            who,
            priority=body.priority,
            project=body.project,
            make_run=make_run,
            idempotency_key=idempotency_key,
            body_hash=request_hash(body),
            audit=audit,
            stage_of=stage_of,
            session_id=session_id,
        )

    async def plan(
        self, body: SubmitJobBody, who: Submitter, pod: list[dict[str, Any]] | None = None
    ) -> tuple[JobSpec, MakeRun]:
        """The spec ``body`` runs with before admission (config folded, stack and config
        checked, secret references, git mounts and its image resolved) and the function
        making its stored ResolvedRun from the admitted spec; a Problem (400/422, 503: a
        registry or repository out of reach) when it cannot run."""
        planned = runs.plan(body, self.catalog)
        raise_issues(planned.issues)
        assert planned.stack is not None
        spec = build(body, planned.stack, planned.config)  # hashed only for a default seed
        if pod:
            services = [PodService.model_validate(service) for service in pod]
            spec = spec.model_copy(update={"pod": services})
        await vault.check_refs(self.store, spec.secret_references(), who.org_id)
        if self.resolve_git is not None and spec.connection_ids():
            spec = await self.resolve_git(spec, who.org_id)
        if self.resolve_image is not None:
            spec = await self.resolve_image(spec, who.org_id, own=body.image is not None)
        return spec, lambda s: runs.stored_run(s, planned.folded, planned.has_runspec)

    def plan_like(
        self, body: SubmitJobBody, like: JobSpec, fingerprint: Callable[[], str]
    ) -> tuple[JobSpec, MakeRun]:
        """``plan`` of a body that is the body ``like`` was planned from but for its
        ``config`` and ``seed`` (an array's item): its config checked and resolved (the
        same Problem ``plan`` raises), the rest of ``like`` kept, its own seed (a default
        one from ``fingerprint``, its ``body_hash``)."""
        planned = runs.plan(body, self.catalog)
        raise_issues(planned.issues)
        seed = body.seed if body.seed is not None else default_seed(fingerprint())
        spec = like.model_copy(update={"config": planned.config, "seed": seed})
        return spec, lambda s: runs.stored_run(s, planned.folded, planned.has_runspec)

    def admitted(
        self,
        new: repo.NewJob,
        decision: adm.Decision,
        make_run: MakeRun,
        known_hash: str | None = None,
        known: Alike | None = None,
    ) -> tuple[repo.NewJob, JobDemand]:
        """``new`` as admitted: limits clamped, placeable (else a 422 Problem), hashed
        plain and stored sealed, with its ResolvedRun and the admission notes; and its
        placement demand (placement takes it as is). ``known``: the memo of an array's
        jobs (``runplane/jobs/alike.py``), the same results for less."""
        limits = decision.clamp.limits
        if known is None:
            resolved = finish(
                new.spec,
                priority=new.priority,
                project=new.project,
                limits=limits,
                known_hash=known_hash,
            )
        else:
            resolved = _finish_alike(new, limits, known_hash, known)
        resolved = replace(resolved, spec=self._preemption(resolved.spec, decision.caps))
        demand = _check_placeable(resolved, new.id, new.org_id, known)
        spec = sealed(resolved.spec, self.sealer, new.org_id)
        if known is None:
            return replace(
                new,
                spec=spec,
                spec_hash=resolved.spec_hash,
                run=make_run(resolved.spec),
                notes=decision.clamp.notes,
            ), demand
        # a sealed spec is its own (fresh nonces): encoded as ever, in the insert
        text, part = known.stored(spec) if spec is resolved.spec else (None, None)
        admitted = replace(
            new,
            spec=spec,
            spec_hash=resolved.spec_hash,
            run=known.run(resolved.spec, make_run),
            notes=decision.clamp.notes,
            spec_json=text,
            spec_part=part,
        )
        return admitted, demand

    def _preemption(self, spec: JobSpec, caps: Caps) -> JobSpec:
        """``spec`` with its preemption fixed by the policy (docs/placement.md
        "Preemption"): unset, it is the layers' ``preemptible_default``; a preemptible
        job's grace is its own or RUNPLANE_PREEMPT_GRACE_SEC, within
        ``max_preempt_grace_sec``. A job that is not preemptible keeps its spec as it was
        (no key added: its stored spec is what it was before preemption existed). An
        interactive session is preemptible only when it asks: the default is for runs."""
        preemptible = spec.preemptible
        if preemptible is None:
            preemptible = spec.mode == "run" and bool(caps["preemptible_default"])
        if not preemptible:
            return spec
        grace = min(spec.preempt_grace_sec or self.preempt_grace_sec, caps["max_preempt_grace_sec"])
        return spec.with_preemption(True, grace)

    async def dry_run(self, body: SubmitJobBody, who: Submitter) -> DryRun:
        """Plan, clamp and check ``body`` as a submit would, without reserving or enqueuing.
        An unknown stack is still a 400 (the spec's answer for validate and resolve)."""
        planned = runs.plan(body, self.catalog)
        raise_issues([i for i in planned.issues if i.status == 400])
        limits = {k: getattr(body.limits, k) for k in LIMIT_KEYS}
        decision = await adm.check(
            self.admission, adm.Request(who.org_id, who.subject, body.project, limits)
        )
        clamp = decision.clamp
        errors = planned.errors()
        warnings = list(planned.warnings) + [
            runs.RunProblem(f"limits.{key}", "clamped", f"{note} (policy ceiling)")
            for key, note in zip(clamp.reduced, clamp.notes, strict=True)
        ]
        digest = None
        if planned.ok:
            assert planned.stack is not None
            spec = build(body, planned.stack, planned.config)
            resolved = finish(
                spec, priority=body.priority, project=body.project, limits=clamp.limits
            )
            try:
                _check_placeable(resolved)
                digest = resolved.spec_hash
            except Problem as exc:
                errors += [runs.RunProblem(e.key, e.code, e.message) for e in exc.errors]
        run = runs.resolved_run(
            body.stack, planned.command(), clamp.limits, planned.config, planned.folded
        )
        return DryRun(body.stack, run, errors, warnings, digest)

    async def rerun(
        self, job_id: str, who: Submitter, org_id: str | None, *, audit: InTx | None = None
    ) -> Created:
        """A new job with the same resolved spec, admitted afresh: it keeps the spec_hash
        unless today's ceilings clamp its limits (then it would not reproduce the first)."""
        row = await repo.get_row(self.store, job_id, org_id)
        if row is None:
            raise not_found("job")
        if row.session_id is not None:
            raise Problem(
                409,
                "session_job",
                f"job {job_id} carries the pod of session {row.session_id}; a pod runs only "
                "under its session: start a new one with POST /v1/sessions",
            )
        # the plain values, sealed afresh for the new row
        spec, source_run = opened(row.spec, self.sealer, row.org_id)[0], row.run

        def make_run(admitted: JobSpec) -> dict[str, Any]:
            if source_run is None:
                return runs.stored_run(admitted, runs.NO_LAYERS, False)
            return {**source_run, "resources": runs.resources(admitted.limits.model_dump())}

        return await self._create(
            spec,
            Submitter(row.org_id, who.subject),
            priority=row.priority,
            project=row.project,
            make_run=make_run,
            known_hash=row.spec_hash,
            audit=audit,
            rerun_of=row.id,
        )

    async def _create(
        self,
        spec: JobSpec,
        who: Submitter,
        *,
        priority: int,
        project: str,
        make_run: MakeRun,
        known_hash: str | None = None,
        idempotency_key: str | None = None,
        body_hash: str | None = None,
        audit: InTx | None = None,
        rerun_of: str | None = None,
        stage_of: tuple[str, str, int] | None = None,
        session_id: str | None = None,
    ) -> Created:
        pipeline_run_id, stage, stage_retry = stage_of or (None, None, 0)
        new = repo.NewJob(
            id=new_id("job_"),
            org_id=who.org_id,
            project=project,
            submitted_by=who.subject,
            spec=spec,
            spec_hash="",
            priority=priority,
            idempotency_key=idempotency_key,
            idempotency_hash=body_hash if idempotency_key else None,
            also=audit,
            rerun_of=rerun_of,
            pipeline_run_id=pipeline_run_id,
            stage=stage,
            stage_retry=stage_retry,
            session_id=session_id,
        )
        prior = await repo.prior_key(
            self.store, "jobs", who.org_id, idempotency_key, new.idempotency_hash
        )
        if prior is not None:
            return await self._replay(prior)
        request = adm.Request(
            who.org_id, who.subject, project, {k: getattr(spec.limits, k) for k in LIMIT_KEYS}
        )
        decision = await adm.admit(self.admission, request, new.id)
        if decision.refusal is not None:
            raise AdmissionRefused(decision.refusal, decision.reason)
        try:
            new, demand = self.admitted(new, decision, make_run, known_hash)
            inserted = await self.store.transaction(repo.insert_job(self.store, new))
        except BaseException:
            await self.release(new.id)
            raise
        if not isinstance(inserted, JobRow):  # a replay that raced us to the insert
            await self.release(new.id)
            return await self._replay(inserted)
        await self.enqueue(inserted, demand)
        return Created(inserted, decision.clamp.notes)

    async def enqueue(self, row: JobRow, demand: JobDemand) -> None:
        """Hand a job just written to placement, shielded: a request cancelled between its
        insert and this hand-off must not leave a stored job out of the queue. Queued, not
        activated: its actor starts when placement assigns it (or anyone asks it
        something); an activation meanwhile enqueues it again, harmlessly."""
        with trio.CancelScope(shield=True):
            await self.placement.tell(pl.Enqueue.of(row, demand))

    async def enqueue_many(self, rows: Sequence[JobRow], demands: dict[str, JobDemand]) -> None:
        """``enqueue`` each of an array's jobs, in order, without a scheduling point between
        them while placement's mailbox has room: placement takes the array's messages in a
        row and plans once for them, not once per job."""
        with trio.CancelScope(shield=True):
            for row in rows:
                await self.placement.tell_now(pl.Enqueue.of(row, demands[row.id]))

    async def release(self, job_id: str) -> None:
        with trio.CancelScope(shield=True):
            await self.admission.tell(adm.Release(job_id))

    async def _replay(self, job_id: str) -> Created:
        await self.registry.get(JOBS, job_id)
        row = await repo.get_row(self.store, job_id, None)
        assert row is not None
        return Created(row)

    async def cancel(self, job_id: str, org_id: str | None) -> tuple[JobRow, CancelOutcome]:
        row = await self._visible(job_id, org_id)
        if row.phase.terminal:
            return row, CancelOutcome(cancelled=False, killed_on_node=False)
        outcome = await self.registry.ask(JOBS, job_id, Cancel())
        fresh = await repo.get_row(self.store, job_id, None)
        assert fresh is not None
        return fresh, outcome

    async def set_priority(self, job_id: str, org_id: str | None, priority: int) -> JobRow:
        await self._visible(job_id, org_id)
        await self.registry.ask(JOBS, job_id, SetPriority(priority))
        fresh = await repo.get_row(self.store, job_id, None)
        assert fresh is not None
        return fresh

    def follow(self, job_id: str, since: int) -> AsyncIterator[list[JobEvent]]:
        """The job's telemetry after ``since``: history, then live, ending after its
        terminal phase event (``runplane/jobs/follow.py``)."""

        async def activate() -> object:
            return await self.registry.get(JOBS, job_id)

        return follow(JobEventSource(self.store, self.hub, job_id, activate), since)

    async def wait_reasons(
        self, rows: Sequence[JobRow], *, best_effort: bool = False
    ) -> dict[str, str]:
        """Placement's wait reason of each queued row. A busy placement (a full mailbox,
        no answer in time) is a 503, or with ``best_effort`` no reason at all: the answer
        to a write the store already took must not fail (a client retrying it without an
        Idempotency-Key would create a second job)."""
        queued = tuple(r.id for r in rows if r.phase is Phase.QUEUED)
        if not queued:
            return {}
        if not best_effort:
            return await self.placement.try_ask(pl.WaitReasons(queued))  # full: 503
        try:
            ask = self.placement.try_ask(pl.WaitReasons(queued), timeout=BEST_EFFORT_ASK_SEC)
            return await ask
        except (MailboxFull, AskTimeout):
            log.info("wait reasons left out: placement is busy", extra={"jobs": len(queued)})
            return {}

    async def _visible(self, job_id: str, org_id: str | None) -> JobRow:
        row = await repo.get_row(self.store, job_id, org_id)
        if row is None:
            raise not_found("job")
        return row
