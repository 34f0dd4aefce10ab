"""``/v1/schedules``: cron and interval schedules of jobs and pipelines (docs/schedules.md,
an extension of the contract). Creating and changing one needs what submitting needs
(``runs:submit``); reads are narrowed to the caller's org (another org's id is 404, as an
unknown one). 503 with ``RUNPLANE_DISABLE=schedules``."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane.auth.rules import READ, scope
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.guards import require_area
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, int_arg, paging
from runplane.http.routes.artifacts import public_origin
from runplane.schedules.body import ScheduleBody, SchedulePatch
from runplane.services.schedules import Creator, Schedules

blueprint = Blueprint("schedules", __name__, url_prefix="/v1/schedules")

LIST_DEFAULT, LIST_MAX = 100, 1000


def _service() -> Schedules:
    require_area("schedules", "schedules")
    return services().root.schedules


def _audited(view: dict[str, Any]) -> dict[str, Any]:
    keys = ("name", "cron", "every", "timezone", "concurrency", "suspend", "next_run_at")
    return {k: view[k] for k in keys}


@blueprint.post("")
@doc(
    "Create a schedule",
    v.ScheduleView,
    status=201,
    body=ScheduleBody,
    # schedules (docs/schedules.md, an addition): changing one needs what submitting needs
    rule=scope("runs:submit"),
)
async def create_schedule() -> tuple[dict[str, Any], int]:
    service = _service()
    body = await parse_body(ScheduleBody)
    caller = current_caller()
    principal = caller.principal
    who = Creator(
        caller.org_id,
        caller.subject,
        principal.credential if principal is not None else "none",
        principal.credential_id if principal is not None else None,
    )
    view = await service.create(body, who, origin=public_origin())
    await audit.record(
        "schedules:create",
        "schedule",
        view["schedule_id"],
        org_id=view["org_id"],
        after=_audited(view),
    )
    return view, 201


@blueprint.get("")
@accepts_query(*paging(LIST_MAX))
@doc("Schedules", v.ScheduleView, many=True, rule=READ)
async def list_schedules() -> list[dict[str, Any]]:
    service = _service()
    limit = int_arg("limit", LIST_DEFAULT, minimum=1, maximum=LIST_MAX)
    return await service.listing(
        current_caller().read_org, limit=limit, offset=int_arg("offset", 0)
    )


@blueprint.get("/<schedule_id>")
@doc("One schedule with its recent runs", v.ScheduleView, rule=READ)
async def get_schedule(schedule_id: str) -> dict[str, Any]:
    return await _service().get(schedule_id, current_caller().read_org)


@blueprint.patch("/<schedule_id>")
@doc("Change a schedule", v.ScheduleView, body=SchedulePatch, rule=scope("runs:submit"))
async def patch_schedule(schedule_id: str) -> dict[str, Any]:
    service = _service()
    body = await parse_body(SchedulePatch)
    view = await service.patch(schedule_id, current_caller().read_org, body)
    await audit.record(
        "schedules:update", "schedule", schedule_id, org_id=view["org_id"], after=_audited(view)
    )
    return view


@blueprint.delete("/<schedule_id>")
@doc("Delete a schedule", v.Deleted, rule=scope("runs:submit"))
async def delete_schedule(schedule_id: str) -> dict[str, str]:
    row = await _service().delete(schedule_id, current_caller().read_org)
    await audit.record("schedules:delete", "schedule", row.id, org_id=row.org_id)
    return {"deleted": row.id}
