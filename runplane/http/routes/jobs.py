"""Job routes: submit, list, get, cancel, priority, rerun, logs, artifacts."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any

from pydantic import Field
from quart import Blueprint, request

from runplane.auth.audit import By
from runplane.auth.rules import READ, Rule, scope
from runplane.http import audit
from runplane.http.bodies import Body, parse_body
from runplane.http.caller import current_caller
from runplane.http.context import Services, services
from runplane.http.listing import JOB_LIST_PARAMS, job_filter, listing
from runplane.http.mcp.tools import JobArgs, ListJobsArgs, LogsArgs, Tool
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, choice, choice_arg, int_arg, integer
from runplane.jobs.rows import JobRow
from runplane.jobs.spec import SubmitJobBody
from runplane.jobs.view import job_view
from runplane.problems import FieldProblem, Problem, not_found
from runplane.services.jobs import Created, Jobs, Submitter

blueprint = Blueprint("jobs", __name__, url_prefix="/v1/jobs")

_IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
_STREAMS = ("stdout", "stderr", "system")
#: Most log lines one read returns.
LOG_LIMIT_MAX = 100_000


def jobs_service() -> Jobs:
    return services().root.jobs


async def job_reply(
    row: JobRow, *, best_effort: bool = False, jobs: Jobs | None = None
) -> dict[str, Any]:
    """The Job view of one row, with its wait reason while queued (``best_effort``: none
    when placement is busy, instead of a 503)."""
    reasons = await (jobs or jobs_service()).wait_reasons([row], best_effort=best_effort)
    return job_view(row, wait_reason=reasons.get(row.id))


async def created_reply(
    created: Created, *, jobs: Jobs | None = None, **extra: Any
) -> tuple[dict[str, Any], int]:
    """The 202 of a submit, rerun or run: the Job, ``extra`` and the admission notes. The
    job is stored: nothing may fail the answer now (the wait reason is best effort)."""
    view = await job_reply(created.row, best_effort=True, jobs=jobs)
    return {**view, **extra, "clamp_notes": list(created.notes)}, 202


async def submitted(
    svc: Services, body: SubmitJobBody, by: By, key: str | None
) -> tuple[dict[str, Any], int]:
    """Submit ``body`` for ``by`` (the principal and its address) and answer the 202:
    ``POST /v1/jobs`` on both lanes (docs/lean-lanes.md)."""
    principal, jobs = by.principal, svc.root.jobs
    created = await jobs.submit(
        body,
        Submitter(principal.org_id, principal.subject),
        idempotency_key=key,
        audit=audit.job_entry_of(svc, by, "runs:submit"),
    )
    return await created_reply(created, jobs=jobs)


def idempotency_key() -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not _IDEMPOTENCY_KEY.match(key):
        raise Problem(
            400,
            "invalid_header",
            "Idempotency-Key must be 1-200 printable ASCII characters without spaces",
            [FieldProblem("Idempotency-Key", "invalid", "1-200 printable ASCII characters")],
        )
    return key


@blueprint.post("")
@doc(
    "Submit a job",
    v.JobSubmitted,
    status=202,
    body=SubmitJobBody,
    errors=(409, 429),
    rule=scope("runs:submit"),
    mcp=Tool(
        "submit_job",
        "Submit a job",
        "Submit a job (a SubmitJobBody: stack, command, config, limits, ...). Answers the "
        "job, queued; admission may refuse it (the org's concurrency limit).",
        SubmitJobBody,
        read_only=False,
        idempotent=False,
    ),
)
async def submit() -> tuple[dict[str, Any], int]:
    body = await parse_body(SubmitJobBody)
    return await submitted(services(), body, audit.by(), idempotency_key())


@blueprint.get("")
@accepts_query(*JOB_LIST_PARAMS)
@doc(
    "Jobs",
    v.Job,
    many=True,
    page=v.JobPage,
    rule=READ,
    mcp=Tool(
        "list_jobs", "List jobs", "Jobs, newest first, optionally by phase or stack.", ListJobsArgs
    ),
)
async def listjobs_service() -> Any:
    async def render(rows: list[JobRow]) -> list[dict[str, Any]]:
        reasons = await jobs_service().wait_reasons(rows)
        return [job_view(r, wait_reason=reasons.get(r.id)) for r in rows]

    return await listing(job_filter(spec_and_node=True), render)


async def _row(job_id: str) -> JobRow:
    row = await services().root.records.row(job_id, current_caller().read_org)
    if row is None:
        raise not_found("job")
    return row


@blueprint.get("/<job_id>")
@doc(
    "One job",
    v.Job,
    rule=Rule("read", shared=("view",)),
    mcp=Tool(
        "get_job",
        "Get a job",
        "One job: phase, node, exit code, error, final metrics, artifacts.",
        JobArgs,
    ),
)
async def get_job(job_id: str) -> dict[str, Any]:
    return await job_reply(await _row(job_id))


@blueprint.post("/<job_id>/cancel")
@doc(
    "Cancel a job",
    v.CancelResult,
    rule=scope("runs:cancel"),
    mcp=Tool(
        "cancel_job",
        "Cancel a job",
        "Cancel a job that has not ended (it is killed on its node if running).",
        JobArgs,
        read_only=False,
        destructive=True,
    ),
)
async def cancel(job_id: str) -> dict[str, Any]:
    row, outcome = await jobs_service().cancel(job_id, current_caller().read_org)
    await audit.record_job("runs:cancel", row, cancelled=outcome.cancelled)
    return {
        **job_view(row),
        "cancelled": outcome.cancelled,
        "killed_on_node": outcome.killed_on_node,
    }


class PriorityBody(Body):
    #: the range a submit's priority takes (int32: the spec's, and the column's)
    priority: Annotated[int, Field(ge=-(2**31), le=2**31 - 1)]


@blueprint.post("/<job_id>/priority")
@doc(
    "Change a queued job's priority",
    v.Job,
    body=PriorityBody,
    errors=(409,),
    rule=scope("runs:priority"),
)
async def set_priority(job_id: str) -> dict[str, Any]:
    body = await parse_body(PriorityBody)
    if not -(2**31) <= body.priority < 2**31:
        raise Problem(
            400,
            "out_of_range",
            "priority must fit in 32 bits",
            [FieldProblem("priority", "out_of_range", "a 32-bit integer")],
        )
    row = await jobs_service().set_priority(job_id, current_caller().read_org, body.priority)
    return await job_reply(row)


@blueprint.post("/<job_id>/rerun")
@doc(
    "Run a job again with the same spec",
    v.JobSubmitted,
    status=202,
    errors=(409, 422, 429),
    rule=scope("runs:submit"),
    mcp=Tool(
        "rerun_job",
        "Rerun a job",
        "Run a job again with the same spec: a new job.",
        JobArgs,
        read_only=False,
        idempotent=False,
    ),
)
async def rerun(job_id: str) -> tuple[dict[str, Any], int]:
    caller = current_caller()
    created = await jobs_service().rerun(
        job_id,
        Submitter(caller.org_id, caller.subject),
        caller.read_org,
        audit=audit.job_entry("runs:submit", rerun_of=job_id),
    )
    return await created_reply(created)


@blueprint.get("/<job_id>/logs")
@accepts_query(
    choice("stream", _STREAMS),
    integer("since_seq"),
    integer("limit", minimum=1, maximum=LOG_LIMIT_MAX),
)
@doc(
    "A job's logs and metrics",
    v.JobLogs,
    rule=Rule("read", shared=("logs",)),
    mcp=Tool(
        "get_logs",
        "Get a job's logs",
        "A job's log lines and metric points after since_seq; next_seq pages on.",
        LogsArgs,
    ),
)
async def logs(job_id: str) -> dict[str, Any]:
    row = await _row(job_id)
    stream = choice_arg("stream", _STREAMS)
    since = int_arg("since_seq", 0)
    limit = int_arg("limit", 10_000, minimum=1, maximum=LOG_LIMIT_MAX)
    events = await services().root.records.events(
        job_id, since, limit=limit, kinds=("log", "metric")
    )
    out_logs, out_metrics, last = [], [], since
    for event in events:
        data = json.loads(event.data)
        last = event.seq
        if event.kind == "log":
            if stream is None or data["stream"] == stream:
                entry = {"stream": data["stream"], "line": data["line"]}
                if "service" in data:  # a session pod's service (docs/sessions.md)
                    entry["service"] = data["service"]
                if "rank" in data:  # a gang's rank (docs/jobs.md "Multi-node jobs")
                    entry["rank"] = data["rank"]
                out_logs.append(entry)
        else:
            point = {"step": data.get("step"), "values": data["values"]}
            if "rank" in data:
                point["rank"] = data["rank"]
            out_metrics.append(point)
    return {"logs": out_logs, "metrics": out_metrics, "phase": row.phase.value, "next_seq": last}


@blueprint.get("/<job_id>/artifacts")
@doc(
    "A job's artifacts",
    v.ArtifactRef,
    many=True,
    rule=Rule("read", shared=("artifacts",)),
    mcp=Tool(
        "list_artifacts",
        "List a job's artifacts",
        "The files a job kept, with their sizes and download references.",
        JobArgs,
    ),
)
async def artifacts(job_id: str) -> list[dict[str, Any]]:
    return list((await _row(job_id)).artifacts)
