"""Run routes (RunSpec): submit, list, get, and the dry runs validate and resolve.

A run is a job submitted with (optional) config layers; a single-step run's id is its
job's id. Submits pass the same admission gate as POST /v1/jobs; validate and resolve
plan, clamp and check the body the same way and never enqueue.
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane.auth.rules import READ, scope
from runplane.auth.shares import EmbedMintBody
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.listing import RUN_LIST_PARAMS, job_filter, listing
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, boolean, flag_arg
from runplane.http.routes.jobs import created_reply, idempotency_key, job_reply, jobs_service
from runplane.http.routes.sharing import mint_grant
from runplane.jobs.rows import JobRow
from runplane.problems import Problem, not_found
from runplane.runs import RunSpecBody
from runplane.runs.view import run_detail, run_row
from runplane.services.jobs import Submitter

blueprint = Blueprint("runs", __name__, url_prefix="/v1/runs")


def _submitter() -> Submitter:
    caller = current_caller()
    return Submitter(caller.org_id, caller.subject)


@blueprint.post("")
@accepts_query(boolean("embed"))
@doc(
    "Submit a run (a RunSpec with layers)",
    v.JobSubmitted,
    status=202,
    body=RunSpecBody,
    errors=(409, 429),
    rule=scope("runs:submit"),
)
async def submit() -> tuple[dict[str, Any], int]:
    embed = flag_arg("embed")
    if embed and not services().root.accounts.supports_identity:
        raise Problem(
            503,
            "auth_store_unavailable",
            "embed grants need a database (RUNPLANE_DATABASE_URL=memory); submit without ?embed=1",
        )
    body = await parse_body(RunSpecBody)
    created = await jobs_service().submit(
        body,
        _submitter(),
        idempotency_key=idempotency_key(),
        audit=audit.job_entry("runs:submit"),
    )
    extra: dict[str, Any] = {"run_id": created.row.id}
    if embed:  # a grant of every category with the default lifetime, beside the job
        extra["embed"] = await mint_grant(created.row, EmbedMintBody(), _submitter().subject)
    return await created_reply(created, **extra)


@blueprint.get("")
@accepts_query(*RUN_LIST_PARAMS)
@doc("Runs", v.RunRow, many=True, page=v.RunPage, rule=READ)
async def list_runs() -> Any:
    async def render(rows: list[JobRow]) -> list[dict[str, Any]]:
        return [run_row(r) for r in rows]

    return await listing(job_filter(spec_and_node=False), render)


@blueprint.post("/validate")
@doc(
    "Validate a run without submitting it",
    v.RunValidation,
    body=RunSpecBody,
    rule=scope("runs:submit"),
)
async def validate() -> dict[str, Any]:
    body = await parse_body(RunSpecBody)
    dry = await jobs_service().dry_run(body, _submitter())
    return {"stack": dry.stack, **dry.validation()}


@blueprint.post("/resolve")
@doc(
    "Resolve a run's layers without submitting it",
    v.RunResolution,
    body=RunSpecBody,
    rule=scope("runs:submit"),
)
async def resolve() -> dict[str, Any]:
    body = await parse_body(RunSpecBody)
    dry = await jobs_service().dry_run(body, _submitter())
    return {
        "resolved": dry.run,
        "diff": dry.run["layers"],
        "validation": dry.validation(),
        "spec_hash": dry.spec_hash,
    }


@blueprint.get("/<run_id>")
@doc("One run", v.RunDetail, rule=READ)
async def get_run(run_id: str) -> dict[str, Any]:
    row = await services().root.records.row(run_id, current_caller().read_org)
    if row is None:
        raise not_found("run")
    return run_detail(row, await job_reply(row))
