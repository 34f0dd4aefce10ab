"""Job array routes (docs/jobs.md "Job arrays"): submit a batch or a sweep, read an
array's progress, cancel it whole. Its jobs list with ``GET /v1/jobs?array=``."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane.auth.audit import By
from runplane.auth.rules import READ, scope
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller
from runplane.http.context import Services, services
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.routes.jobs import idempotency_key
from runplane.jobs.arrays import BatchBody, fast_batch
from runplane.services.job_arrays import JobArrays
from runplane.services.jobs import Submitter
from runplane.timefmt import iso_ms

blueprint = Blueprint("arrays", __name__, url_prefix="/v1")


def arrays_service() -> JobArrays:
    return services().root.arrays


@blueprint.post("/jobs/batch")
@doc(
    "Submit a job array (a batch or a sweep)",
    v.BatchSubmitted,
    status=202,
    body=BatchBody,
    errors=(409, 429),
    rule=scope("runs:submit"),
)
async def submit_batch() -> tuple[dict[str, Any], int]:
    body = await parse_body(BatchBody, fast=fast_batch)
    return await batch_submitted(services(), body, audit.by(), idempotency_key())


async def batch_submitted(
    svc: Services, body: BatchBody, by: By, key: str | None
) -> tuple[dict[str, Any], int]:
    """Submit the array ``body`` for ``by`` and answer the 202: ``POST /v1/jobs/batch``
    on both lanes (docs/lean-lanes.md)."""
    principal = by.principal
    created = await svc.root.arrays.submit(
        body,
        Submitter(principal.org_id, principal.subject),
        idempotency_key=key,
        audit=audit.array_entry_of(svc, by, "runs:submit"),
    )
    jobs = [
        {
            "index": row.array_index,
            "job_id": row.id,
            "spec_hash": row.spec_hash,
            "phase": row.phase.value,
            "clamp_notes": list(created.notes.get(row.array_index or 0, ())),
        }
        for row in created.rows
    ]
    reply = {
        "array_id": created.array_id,
        "count": len(jobs),
        "jobs": jobs,
        "rejected": [r.as_dict() for r in created.rejected],
    }
    return reply, 202  # a replay answers the same array


@blueprint.get("/arrays/<array_id>")
@doc("A job array's progress", v.JobArray, rule=READ)
async def get_array(array_id: str) -> dict[str, Any]:
    row = await arrays_service().get(array_id, current_caller().read_org)
    return {
        "array_id": row["id"],
        "org_id": row["org_id"],
        "project": row["project"],
        "submitted_by": row["submitted_by"],
        "count": row["count"],
        "sweep": row["sweep"],
        "created_at": iso_ms(row["created_at"]),
        "phases": row["phases"],
    }


@blueprint.post("/arrays/<array_id>/cancel")
@doc("Cancel every live job of an array", v.ArrayCancelResult, rule=scope("runs:cancel"))
async def cancel_array(array_id: str) -> dict[str, Any]:
    cancelled, ended = await arrays_service().cancel(array_id, current_caller().read_org)
    await audit.record("runs:cancel", "job_array", array_id, after={"cancelled": cancelled})
    return {"array_id": array_id, "cancelled": cancelled, "not_cancelled": ended}
