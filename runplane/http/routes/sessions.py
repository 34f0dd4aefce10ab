"""Session routes (``docs/sessions.md``): create, list, get, delete, keepalive (one, or
many at once), and signal (always 501: media signaling is deferred). Thin: the sessions
service checks the pod (400/422), admits its job (429) and drives the session's actor."""

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
from runplane.problems import Problem
from runplane.services.jobs import Submitter
from runplane.services.sessions import Sessions, batch_ids
from runplane.sessions.body import KeepaliveBatchBody, SessionBody

blueprint = Blueprint("sessions", __name__, url_prefix="/v1/sessions")


def _service() -> Sessions:
    require_area("sessions", "sessions")
    return services().root.sessions


@blueprint.post("")
@doc(
    "Start an interactive session (a pod)",
    v.SessionView,
    status=202,
    body=SessionBody,
    errors=(429,),
    rule=scope("runs:submit"),
)
async def create() -> tuple[dict[str, Any], int]:
    service = _service()
    body = await parse_body(SessionBody)
    caller = current_caller()
    view = await service.create(body, Submitter(caller.org_id, caller.subject))
    await audit.record(
        "sessions:create",
        "session",
        view["id"],
        org_id=view["org_id"],
        after={k: view[k] for k in ("name", "project", "job_id", "idle_ttl_sec", "services")},
    )
    return view, 202


@blueprint.get("")
@accepts_query(*paging(LIST_MAX))
@doc("Sessions", v.SessionView, many=True, rule=READ)
async def list_sessions() -> list[dict[str, Any]]:
    service = _service()
    limit = int_arg("limit", LIST_DEFAULT, minimum=1, maximum=LIST_MAX)
    return await service.list(current_caller().read_org, limit=limit, offset=int_arg("offset", 0))


@blueprint.get("/<session_id>")
@doc("One session with its services", v.SessionView, rule=READ)
async def get_session(session_id: str) -> dict[str, Any]:
    return await _service().view(session_id, current_caller().read_org)


@blueprint.delete("/<session_id>")
@doc("Stop a session", v.SessionView, rule=scope("runs:cancel"))
async def delete(session_id: str) -> dict[str, Any]:
    view = await _service().delete(session_id, current_caller().read_org)
    await audit.record(
        "sessions:delete",
        "session",
        session_id,
        org_id=view["org_id"],
        after={"phase": view["phase"], "error": view["error"]},
    )
    return view


@blueprint.post("/<session_id>/keepalive")
@doc("Keep a session alive", v.SessionView, errors=(409,), rule=scope("runs:submit"))
async def keepalive(session_id: str) -> dict[str, Any]:
    return await _service().keepalive(session_id, current_caller().read_org)


@blueprint.post("/keepalive")
@doc(
    "Keep many sessions alive",
    v.KeepaliveBatchResult,
    body=KeepaliveBatchBody,
    errors=(422,),
    rule=scope("runs:submit"),
)
async def keepalive_many() -> dict[str, Any]:
    service = _service()
    ids = batch_ids((await parse_body(KeepaliveBatchBody)).ids)
    return await service.keepalive_many(ids, current_caller().read_org)


@blueprint.post("/<session_id>/signal")
@doc(
    "Signal a session (not implemented)",
    v.View,
    errors=(501,),
    # always 501 (after the 404 of an unknown or another org's session)
    rule=READ,
)
async def signal(session_id: str) -> dict[str, Any]:
    await _service().view(session_id, current_caller().read_org)  # 404 first
    raise Problem(
        501,
        "not_implemented",
        "session signaling (the media relay) is not available; drive the pod through its"
        " teleop stream (teleop_stream in the session's detail view)",
    )
