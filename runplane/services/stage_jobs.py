"""A chunk of a pipeline wave's stage jobs, created like a job array (issue 42): each
stage planned as a submit would plan it, the chunk admitted in one ask to the gate, the
admitted jobs inserted in ONE transaction, then queued (``services/job_arrays.py`` is
the same path for ``POST /v1/jobs/batch``).

Admission stays per job, as a single submit's: when the gate cannot take the whole chunk
(its all-or-nothing ``AdmitMany``), the chunk is admitted one job at a time up to the
first refusal, and that stage and every one after it wait with the refusal's reason
(the pipeline actor tries them again). A stage whose body no longer validates, or that
placement cannot read, fails alone; the others are created.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import trio
from pydantic import ValidationError

from runplane import sealed_env
from runplane.actors import admission as adm
from runplane.actors import placement as pl
from runplane.actors.pipeline import Invalid, Launch, LaunchResult, Refused
from runplane.ids import new_id
from runplane.jobs import repo
from runplane.jobs.alike import Alike
from runplane.jobs.jobspec import JobSpec, spec_hash
from runplane.persistence import now_ms, to_json
from runplane.placement import JobDemand
from runplane.policy import LIMIT_KEYS
from runplane.problems import Problem
from runplane.runs import RunProblem, RunSpecBody
from runplane.runtime import AskTimeout, MailboxFull
from runplane.services.jobs import Jobs, MakeRun, Submitter

BUSY = "the server is busy; the stage is tried again shortly"


@dataclass(frozen=True, slots=True)
class _Planned:
    at: int  # the launch's position in the chunk
    new: repo.NewJob
    make_run: MakeRun
    #: the planned spec's hash (one per distinct body), reused when admission clamps nothing
    spec_hash: str


def _problems(exc: ValidationError) -> list[RunProblem]:
    return [
        RunProblem(".".join(str(p) for p in e["loc"]) or "(body)", "invalid", e["msg"])
        for e in exc.errors()
    ]


async def launch_wave(jobs: Jobs, launches: Sequence[Launch]) -> list[LaunchResult]:
    """Create the stage jobs of ``launches`` (one pipeline run's), one result per launch."""
    results: list[LaunchResult | None] = [None] * len(launches)
    planned = await _plan(jobs, launches, results)
    decisions = await _admit(jobs, planned, results)
    admitted: list[repo.NewJob] = []
    demands: dict[str, JobDemand] = {}
    known = Alike()  # the stages of a wave mostly ask alike (its memos are safe across
    # bodies: keyed by the identity of what each result reads, and by the maker of a run)
    try:
        for p, decision in zip(planned, decisions, strict=False):
            try:
                job, demands[p.new.id] = jobs.admitted(
                    p.new, decision, p.make_run, p.spec_hash, known=known
                )
            except Problem as exc:
                results[p.at] = Invalid(exc.detail)
                await jobs.release(p.new.id)
                continue
            admitted.append(job)
            results[p.at] = job.id
        now = now_ms()
        rows = await jobs.store.transaction(lambda tx: repo.write_jobs(tx, admitted, now))
    except BaseException:
        for p in planned[: len(decisions)]:  # every slot still held (twice is harmless)
            await jobs.release(p.new.id)
        raise
    # handed to placement as Jobs.enqueue does (shielded), without a scheduling point per
    # job: a yield per job lets every other ready task run 50 times per chunk
    with trio.CancelScope(shield=True):
        for row in rows:
            await jobs.placement.tell_now(pl.Enqueue.of(row, demands[row.id]))
    jobs.submits["created"] += len(rows)
    assert all(r is not None for r in results)  # each launch planned, admitted or refused
    return [r for r in results if r is not None]


async def _plan(
    jobs: Jobs, launches: Sequence[Launch], results: list[LaunchResult | None]
) -> list[_Planned]:
    """Each stage's spec before admission; a stage that cannot run gets Invalid."""
    planned: list[_Planned] = []
    # the stages of a fan-out mostly run the same body: each distinct one is validated
    # and planned once per chunk (the same body under the same submitter plans the same)
    seen: dict[str, tuple[RunSpecBody, JobSpec, MakeRun, str] | Invalid] = {}
    for at, launch in enumerate(launches):
        run = launch.run
        payload = sealed_env.opened_doc(launch.body, jobs.sealer, run.org_id)[0]
        key = to_json(payload)
        if key not in seen:
            seen[key] = await _plan_one(jobs, payload, Submitter(run.org_id, run.submitted_by))
        done = seen[key]
        if isinstance(done, Invalid):
            results[at] = done
            continue
        body, spec, make_run, digest = done
        new = repo.NewJob(
            id=new_id("job_"),
            org_id=run.org_id,
            project=body.project,
            submitted_by=run.submitted_by,
            spec=spec,
            spec_hash="",
            priority=body.priority,
            pipeline_run_id=run.id,
            stage=launch.stage,
            stage_retry=launch.retry,
        )
        planned.append(_Planned(at, new, make_run, digest))
    return planned


async def _plan_one(
    jobs: Jobs, payload: dict[str, Any], who: Submitter
) -> tuple[RunSpecBody, JobSpec, MakeRun, str] | Invalid:
    try:
        body = RunSpecBody.model_validate(payload)
    except ValidationError as exc:
        return Invalid("; ".join(f"{p.key}: {p.message}" for p in _problems(exc)))
    try:
        spec, make_run = await jobs.plan(body, who)
    except Problem as exc:
        return Invalid(exc.detail)
    return body, spec, make_run, spec_hash(spec)


async def _admit(
    jobs: Jobs, planned: Sequence[_Planned], results: list[LaunchResult | None]
) -> list[adm.Decision]:
    """The admitted prefix's decisions (their slots reserved); the stages after the
    first refusal get Refused."""
    requests = tuple(
        adm.Request(
            p.new.org_id,
            p.new.submitted_by,
            p.new.project,
            {k: getattr(p.new.spec.limits, k) for k in LIMIT_KEYS},
        )
        for p in planned
    )
    ids = tuple(p.new.id for p in planned)
    decisions: list[adm.Decision] = []
    if not planned:
        return decisions
    try:
        many = await adm.admit_many(jobs.admission, requests, ids)
        if many.refusal is None:
            return list(many.decisions)
        for request, job_id in zip(requests, ids, strict=True):  # one by one to the refusal
            one = await adm.admit(jobs.admission, request, job_id)
            if one.refusal is not None:
                break
            decisions.append(one)
        reason = one.reason
    except (MailboxFull, AskTimeout):
        for job_id in ids[: len(decisions)]:
            await jobs.release(job_id)
        decisions, reason = [], BUSY
    for p in planned[len(decisions) :]:
        results[p.at] = Refused(reason)
    return decisions
