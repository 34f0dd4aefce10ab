"""Run views: RunRow for lists, and the run detail (Job + run_id + run + stages)."""

from __future__ import annotations

from typing import Any

from runplane.jobs.rows import JobRow
from runplane.runs.resolve import NO_LAYERS, stored_run
from runplane.timefmt import iso_ms

#: The name of a single-step run's only stage.
MAIN_STAGE = "main"


def stored(row: JobRow) -> dict[str, Any]:
    """The job's stored run (derived from its spec for a job created before runs); a copy,
    the caller's to change."""
    if row.run is not None:
        return dict(row.run)
    return stored_run(row.spec, NO_LAYERS, False)


def run_row(row: JobRow) -> dict[str, Any]:
    return {
        "job_id": row.id,
        "run_id": row.id,
        "has_runspec": bool(row.run is not None and row.run.get("has_runspec")),
        "stack": row.stack,
        "phase": row.phase.value,
        "project": row.project,
        "created_at": iso_ms(row.created_at),
    }


def run_detail(row: JobRow, job: dict[str, Any]) -> dict[str, Any]:
    """``job`` (the Job view of ``row``) plus run_id, has_runspec, run and stages."""
    run = stored(row)
    has_runspec = bool(run.pop("has_runspec", False))
    stage = {
        "id": row.id,
        "name": MAIN_STAGE,
        "stack": row.stack,
        "phase": row.phase.value,
        "job_id": row.id,
    }
    return {**job, "run_id": row.id, "has_runspec": has_runspec, "run": run, "stages": [stage]}
