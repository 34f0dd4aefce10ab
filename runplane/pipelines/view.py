"""The PipelineRun and PipelineStageView objects of the spec, from stored rows."""

from __future__ import annotations

from typing import Any

from runplane.timefmt import iso_ms_or_none

from .machine import StagePhase
from .repo import RunRow, StageRow


def run_view(run: RunRow, stages: list[StageRow] | None = None) -> dict[str, Any]:
    """The PipelineRun; with ``stages`` the detail view."""
    view: dict[str, Any] = {
        "pipeline_run_id": run.id,
        "name": run.name,
        "project": run.project,
        "org_id": run.org_id,
        "status": run.status.value,
        "created_at": iso_ms_or_none(run.created_at),
        "started_at": iso_ms_or_none(run.started_at),
        "finished_at": iso_ms_or_none(run.finished_at),
        "stage_count": run.stage_count,
        "progress": {p.value: int(run.progress.get(p.value, 0)) for p in StagePhase},
        # an addition: POST .../retry so far (docs/pipelines.md "Retry")
        "retries": run.retries,
    }
    if stages is not None:
        view["stages"] = [stage_view(s) for s in stages]
    return view


def stage_view(row: StageRow) -> dict[str, Any]:
    stage = row.stage
    view: dict[str, Any] = {
        "name": stage.name,
        "needs": list(stage.needs),
        "allow_failure": stage.allow_failure,
        "phase": stage.phase.value,
        "stack": row.stack,
        "job_id": stage.job_id,
        "error": stage.error or "",
        "final_metrics": dict(stage.final_metrics),
        # an addition: the run's retries that re-ran this stage (its job is the last's)
        "retry": stage.retry,
    }
    if stage.phase is StagePhase.PENDING and stage.reason:
        # an addition: why a stage whose needs are met has not launched (quota)
        view["wait_reason"] = stage.reason
    return view
