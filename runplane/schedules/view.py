"""The Schedule view (docs/schedules.md): the row, its body with secret-looking env values
shown ``[redacted]``, and its recent runs."""

from __future__ import annotations

from typing import Any

from runplane.sealed_env import KEY, redact_env
from runplane.timefmt import iso_ms_or_none

from .repo import RunRow, ScheduleRow


def _redacted(spec: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in spec.items() if k != KEY}
    if isinstance(out.get("env"), dict):
        out["env"] = redact_env(out["env"])
    if isinstance(out.get("stages"), list):
        out["stages"] = [_redacted(s) for s in out["stages"]]
    return out


def run_view(run: RunRow) -> dict[str, Any]:
    return {
        "due_at": iso_ms_or_none(run.due_at),
        "fired_at": iso_ms_or_none(run.fired_at),
        "outcome": run.outcome,
        "job_id" if not (run.ref or "").startswith("plr_") else "pipeline_run_id": run.ref,
        "status": run.status,
        "detail": run.detail,
    }


def schedule_view(row: ScheduleRow, runs: list[RunRow] | None = None) -> dict[str, Any]:
    view: dict[str, Any] = {
        "schedule_id": row.id,
        "org_id": row.org_id,
        "name": row.name,
        "cron": row.cron,
        "every": _every(row.every_sec),
        "timezone": row.timezone,
        "concurrency": row.concurrency,
        "suspend": row.suspend,
        row.kind: _redacted(row.body["spec"]),
        "created_by": row.created_by,
        "created_at": iso_ms_or_none(row.created_at),
        "updated_at": iso_ms_or_none(row.updated_at),
        "next_run_at": iso_ms_or_none(row.next_run_at),
        "last_run_at": iso_ms_or_none(row.last_run_at),
        "last_error": row.last_error,
    }
    if runs is not None:
        view["runs"] = [run_view(r) for r in runs]
    return view


def _every(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        n, seconds = divmod(seconds, size)
        if n:
            out += f"{n}{unit}"
    return out
