"""The SessionView of the spec, from a stored row (detail views add services, actions
and the teleop stream)."""

from __future__ import annotations

from typing import Any

from runplane.timefmt import iso_ms_or_none

from .repo import SessionRow


def session_view(row: SessionRow, *, detail: bool = False) -> dict[str, Any]:
    state = row.state
    view: dict[str, Any] = {
        "id": row.id,
        "job_id": row.job_id,
        "org_id": row.org_id,
        "name": row.name,
        "project": row.project,
        "phase": state.phase.value,
        "idle_ttl_sec": row.idle_ttl_sec,
        "created_at": iso_ms_or_none(row.created_at),
        "last_keepalive": iso_ms_or_none(state.last_keepalive),
        "started_at": iso_ms_or_none(state.started_at),
        "stopped_at": iso_ms_or_none(state.stopped_at),
        "error": state.error or "",
    }
    if detail:
        view["services"] = [dict(s) for s in row.services]
        view["actions"] = [dict(a) for a in row.actions]
        view["teleop_stream"] = row.teleop_stream
    return view
