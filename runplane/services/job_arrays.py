"""The job arrays service (``POST /v1/jobs/batch``, ``/v1/arrays/{id}``; docs/jobs.md "Job
arrays"): a batch of up to 1,000 jobs planned like single submits, admitted in one ask
to the gate (every slot or none), written in one transaction, then queued.

Every item is planned first; with ``atomic`` (the default) one invalid item refuses the
whole batch with each item's RunProblems (keys prefixed ``jobs.<i>.`` or ``sweep.<i>.``).
A quota that cannot take the whole batch is a 429 saying how many would fit. A batch's
Idempotency-Key lives on its array: a replay answers the same array.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runplane.actors import admission as adm
from runplane.actors.job_messages import JOBS, Cancel, CancelOutcome
from runplane.auth.audit import ArrayEntry
from runplane.ids import new_id
from runplane.jobs import arrays, repo
from runplane.jobs.alike import Alike, Split
from runplane.jobs.jobspec import JobSpec
from runplane.jobs.rows import JobRow
from runplane.jobs.spec import SubmitJobBody, body_doc, body_hash, seed_of
from runplane.persistence import Tx, now_ms
from runplane.placement import JobDemand
from runplane.policy import LIMIT_KEYS
from runplane.policy.refusal import AdmissionRefused
from runplane.problems import FieldProblem, Problem, not_found
from runplane.services.jobs import Jobs, MakeRun, Submitter


@dataclass(frozen=True, slots=True)
class Rejected:
    """An item left out of a non-atomic batch: its index and the problem it got."""

    index: int
    problem: Problem

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "status": self.problem.status,
            "code": self.problem.code,
            "detail": self.problem.detail,
            "errors": [e.as_dict() for e in self.problem.errors],
        }


@dataclass(frozen=True, slots=True)
class ArrayCreated:
    array_id: str
    #: the created jobs in array order
    rows: list[JobRow]
    #: admission notes per array index (clamped limits)
    notes: dict[int, tuple[str, ...]] = field(default_factory=dict)
    rejected: list[Rejected] = field(default_factory=list)
    #: an Idempotency-Key replay of an earlier batch
    replay: bool = False


@dataclass(frozen=True, slots=True)
class _Planned:
    item: arrays.Item
    spec: JobSpec
    make_run: MakeRun


@dataclass(frozen=True, slots=True)
class _Shape:
    """The plan of the first item of a shape (``arrays.shape``): its body and its spec and
    ResolvedRun maker, or the Problem that refused it (every item of the shape gets it)."""

    body: SubmitJobBody
    spec: JobSpec | Problem
    make_run: MakeRun | None

    def spec_for(self, body: SubmitJobBody) -> JobSpec:
        """The spec of ``body``, of this shape: the first's, with ``body``'s own seed."""
        assert isinstance(self.spec, JobSpec)
        if body.seed == self.body.seed:  # the same body
            return self.spec
        return self.spec.model_copy(update={"seed": seed_of(body)})


@dataclass(slots=True)
class _Like:
    """The first item planned of those alike but for their config (``arrays.shape``):
    its body and spec, and its ``body_doc`` cut where the config goes (made when a second
    item needs a default seed)."""

    body: SubmitJobBody
    spec: JobSpec
    split: Split | None = None

    def fingerprint(self, body: SubmitJobBody) -> Callable[[], str]:
        """``body_hash(body)`` for ``body``, alike but for its config: the shared part
        hashed once."""

        def digest() -> str:
            if self.split is None:
                self.split = Split(body_doc(self.body), ("config",))
            try:
                return self.split.sha256({"config": body.config})
            except TypeError:  # not JSON as it is (a body built in code): hashed whole
                return body_hash(body)

        return digest


def _prefixed(item: arrays.Item, exc: Problem) -> list[FieldProblem]:
    errors = exc.errors or [FieldProblem("", exc.code, exc.detail)]
    return [
        FieldProblem(item.prefix + e.key if e.key else item.prefix.rstrip("."), e.code, e.message)
        for e in errors
    ]


def _batch_problem(
    rejected: Sequence[Rejected], items: Sequence[arrays.Item], total: int
) -> Problem:
    """One Problem for a refused batch: 400 when any item is malformed, else 422; every
    item's RunProblems listed under its prefixed keys."""
    by_index = {i.index: i for i in items}
    status = min(r.problem.status for r in rejected)
    errors = [e for r in rejected for e in _prefixed(by_index[r.index], r.problem)]
    first = min(rejected, key=lambda r: (r.problem.status, r.index))
    return Problem(
        status,
        "invalid_batch",
        f"{len(rejected)} of the batch's {total} jobs cannot be submitted (the first, "
        f"item {first.index}: {first.problem.detail}); nothing was created: fix them, or "
        "send `atomic: false` to create the valid ones",
        errors,
    )


def _new_jobs(planned: Sequence[_Planned], who: Submitter, array_id: str) -> list[repo.NewJob]:
    return [
        repo.NewJob(
            id=new_id("job_"),
            org_id=who.org_id,
            project=p.item.body.project,
            submitted_by=who.subject,
            spec=p.spec,
            spec_hash="",
            priority=p.item.body.priority,
            array_id=array_id,
            array_index=p.item.index,
        )
        for p in planned
    ]


def _requests(new_jobs: Sequence[repo.NewJob], who: Submitter) -> tuple[adm.Request, ...]:
    """What the admission gate is asked for each job: its limits."""
    return tuple(
        adm.Request(
            who.org_id, who.subject, j.project, {k: getattr(j.spec.limits, k) for k in LIMIT_KEYS}
        )
        for j in new_jobs
    )


class JobArrays:
    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs
        self.store = jobs.store

    async def submit(
        self,
        batch: arrays.BatchBody,
        who: Submitter,
        *,
        idempotency_key: str | None = None,
        audit: ArrayEntry | None = None,
    ) -> ArrayCreated:
        digest = arrays.batch_hash(batch) if idempotency_key else None
        replay = await repo.prior_key(self.store, "job_arrays", who.org_id, idempotency_key, digest)
        if replay is not None:
            return await self._replay(replay)
        items = arrays.expand(batch)
        planned, rejected = await self._plan(items, who)
        if rejected and (batch.atomic or not planned):
            raise _batch_problem(rejected, items, len(items))
        array_id = new_id("arr_")
        new_jobs = _new_jobs(planned, who, array_id)
        ids = tuple(j.id for j in new_jobs)
        many = await adm.admit_many(self.jobs.admission, _requests(new_jobs, who), ids)
        if many.refusal is not None:
            raise AdmissionRefused(many.refusal, many.reason)
        held = set(ids)
        try:
            admitted, demands = self._admitted(new_jobs, planned, many.decisions, rejected)
            if rejected and (batch.atomic or not admitted):
                raise _batch_problem(rejected, items, len(items))
            for gone in set(ids) - {j.id for j in admitted}:
                held.discard(gone)
                await self.jobs.release(gone)
            array = arrays.NewArray(
                id=array_id,
                org_id=who.org_id,
                project=admitted[0].project,
                submitted_by=who.subject,
                count=len(admitted),
                sweep=batch.sweep,
                idempotency_key=idempotency_key,
                idempotency_hash=digest,
            )
            written = await self.store.transaction(self._insert(array, admitted, audit))
        except BaseException:
            for job_id in held:
                await self.jobs.release(job_id)
            raise
        if isinstance(written, str):  # a replay that raced us to the insert
            for job_id in held:
                await self.jobs.release(job_id)
            return await self._replay(written)
        await self.jobs.enqueue_many(written, demands)
        notes = {j.array_index or 0: j.notes for j in admitted if j.notes}
        rejected.sort(key=lambda r: r.index)
        return ArrayCreated(array_id, written, notes, rejected)

    async def _plan(
        self, items: Sequence[arrays.Item], who: Submitter
    ) -> tuple[list[_Planned], list[Rejected]]:
        """Each item's spec before admission, or why it cannot run. An item whose body is
        another's but for its ``seed`` (the same field values: ``arrays.shape``) is planned
        once; the others take that plan with their own seed (nothing else depends on it)."""
        planned: list[_Planned] = []
        rejected: list[Rejected] = []
        shapes: dict[tuple[int, ...], _Shape] = {}
        likes: dict[tuple[int, ...], _Like] = {}
        for item in items:
            first = shapes.get(key := arrays.shape(item.body))
            if first is None:
                first = shapes[key] = await self._plan_one(item.body, who, likes)
            if isinstance(first.spec, Problem):
                rejected.append(Rejected(item.index, first.spec))
                continue
            assert first.make_run is not None
            planned.append(_Planned(item, first.spec_for(item.body), first.make_run))
        return planned, rejected

    async def _plan_one(
        self, body: SubmitJobBody, who: Submitter, likes: dict[tuple[int, ...], _Like]
    ) -> _Shape:
        """The plan of an item of a new shape: of its config alone when an item like it but
        for its config was planned (a sweep's), else whole."""
        like = likes.get(key := arrays.shape(body, "config"))
        try:
            if like is not None:
                return _Shape(body, *self.jobs.plan_like(body, like.spec, like.fingerprint(body)))
            spec, make_run = await self.jobs.plan(body, who)
        except Problem as exc:
            return _Shape(body, exc, None)
        likes[key] = _Like(body, spec)
        return _Shape(body, spec, make_run)

    def _admitted(
        self,
        new_jobs: Sequence[repo.NewJob],
        planned: Sequence[_Planned],
        decisions: Sequence[adm.Decision],
        rejected: list[Rejected],
    ) -> tuple[list[repo.NewJob], dict[str, JobDemand]]:
        """The jobs as admitted and their demands; a job placement refuses is added to
        ``rejected``."""
        admitted: list[repo.NewJob] = []
        demands: dict[str, JobDemand] = {}
        known = Alike()  # the items of an array mostly ask alike
        for new, p, decision in zip(new_jobs, planned, decisions, strict=True):
            try:
                job, demands[new.id] = self.jobs.admitted(new, decision, p.make_run, known=known)
            except Problem as exc:
                rejected.append(Rejected(p.item.index, exc))
                continue
            admitted.append(job)
        return admitted, demands

    def _insert(
        self, array: arrays.NewArray, jobs: list[repo.NewJob], audit: ArrayEntry | None
    ) -> Callable[[Tx], list[JobRow] | str]:
        def run(tx: Tx) -> list[JobRow] | str:
            now = now_ms()
            if array.idempotency_key is not None:
                replay = repo.claim_key(
                    tx,
                    "job_arrays",
                    array.org_id,
                    array.idempotency_key,
                    array.idempotency_hash,
                    now,
                )
                if replay is not None:
                    return replay
            arrays.insert_array(tx, array, now)
            rows = repo.write_jobs(tx, jobs, now)
            if audit is not None:
                after = {"count": len(rows), "job_ids": [r.id for r in rows]}
                tx.execute(*audit(array.id, array.org_id, after))
            return rows

        return run

    async def _replay(self, array_id: str) -> ArrayCreated:
        rows = await repo.list_rows(
            self.store, repo.JobFilter(array_id=array_id), limit=arrays.MAX_BATCH
        )
        rows.sort(key=lambda r: r.array_index or 0)
        return ArrayCreated(array_id, rows, replay=True)

    async def get(self, array_id: str, org_id: str | None) -> dict[str, Any]:
        """The array's row and its jobs' count per phase; 404 when unknown or another
        org's."""
        row = await arrays.get_array(self.store, array_id, org_id)
        if row is None:
            raise not_found("job array")
        return {**row, "phases": await arrays.phase_counts(self.store, array_id)}

    async def cancel(self, array_id: str, org_id: str | None) -> tuple[int, int]:
        """Cancel every job of the array that has not ended: (cancelled, already ended)."""
        row = await arrays.get_array(self.store, array_id, org_id)
        if row is None:
            raise not_found("job array")
        cancelled = 0
        for job_id in await arrays.live_ids(self.store, array_id):
            outcome: CancelOutcome = await self.jobs.registry.ask(JOBS, job_id, Cancel())
            cancelled += outcome.cancelled
        return cancelled, int(row["count"]) - cancelled
