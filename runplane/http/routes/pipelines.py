"""Pipeline routes (``docs/pipelines.md``): create, list, validate, get, cancel, retry. Thin: the
pipelines service validates (400 topology, 422 a stage) before anything is enqueued."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane.auth.rules import READ, scope
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.guards import require_area
from runplane.http.listing import LIST_DEFAULT, LIST_MAX
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, int_arg, paging
from runplane.http.routes.artifacts import public_origin
from runplane.pipelines.body import PipelineBody
from runplane.services.jobs import Submitter
from runplane.services.pipelines import Pipelines

blueprint = Blueprint("pipelines", __name__, url_prefix="/v1/pipelines")


def _service() -> Pipelines:
    require_area("pipelines", "pipelines")
    return services().root.pipelines


def _submitter() -> Submitter:
    caller = current_caller()
    return Submitter(caller.org_id, caller.subject)


@blueprint.post("")
@doc(
    "Start a pipeline run",
    v.PipelineRun,
    status=202,
    body=PipelineBody,
    errors=(409, 429),
    rule=scope("runs:submit"),
)
async def create() -> tuple[dict[str, Any], int]:
    service = _service()
    body = await parse_body(PipelineBody)
    view = await service.create(body, _submitter(), origin=public_origin())
    await audit.record(
        "pipelines:create",
        "pipeline",
        view["pipeline_run_id"],
        org_id=view["org_id"],
        after={k: view[k] for k in ("name", "project", "status", "stage_count")},
    )
    return view, 202


@blueprint.get("")
@accepts_query(*paging(LIST_MAX))
@doc("Pipeline runs", v.PipelineRun, many=True, rule=READ)
async def list_pipelines() -> list[dict[str, Any]]:
    service = _service()
    limit = int_arg("limit", LIST_DEFAULT, minimum=1, maximum=LIST_MAX)
    return await service.list(current_caller().read_org, limit=limit, offset=int_arg("offset", 0))


@blueprint.post("/validate")
@doc(
    "Validate a pipeline without starting it",
    v.PipelineValidation,
    body=PipelineBody,
    rule=scope("runs:submit"),
)
async def validate() -> dict[str, Any]:
    service = _service()
    body = await parse_body(PipelineBody)
    return (await service.check(body, _submitter())).as_dict()


@blueprint.get("/<run_id>")
@doc("One pipeline run with its stages", v.PipelineRun, rule=READ)
async def get_pipeline(run_id: str) -> dict[str, Any]:
    return await _service().view(run_id, current_caller().read_org)


@blueprint.post("/<run_id>/cancel")
@doc("Cancel a pipeline run", v.PipelineRun, rule=scope("runs:cancel"))
async def cancel(run_id: str) -> dict[str, Any]:
    view = await _service().cancel(run_id, current_caller().read_org)
    await audit.record(
        "pipelines:cancel",
        "pipeline",
        run_id,
        org_id=view["org_id"],
        after={"status": view["status"], "progress": view["progress"]},
    )
    return view


@blueprint.post("/<run_id>/retry")
@doc(
    "Re-run a finished pipeline's failed branches",
    v.PipelineRun,
    errors=(409, 429),
    # an addition (docs/pipelines.md "Retry"): it launches new stage jobs
    rule=scope("runs:submit"),
)
async def retry(run_id: str) -> dict[str, Any]:
    """An addition: re-run the ended run's failed, timed-out, cancelled and skipped stages
    and what needs them; succeeded stages keep their jobs and artifacts."""
    view = await _service().retry(run_id, current_caller().read_org)
    await audit.record(
        "pipelines:retry",
        "pipeline",
        run_id,
        org_id=view["org_id"],
        after={"status": view["status"], "retries": view["retries"]},
    )
    return view
