"""Realtime streams of a job: list, subscribe (a ticket), follow (SSE), teleop, recording.

The streams service (``runplane/services/streams.py``) does the work; these routes check
who may, parse the input, and frame the answers. ``docs/streams.md`` is the contract.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, StringConstraints
from quart import Blueprint, Response, request

from runplane.auth.rules import Rule
from runplane.http.auth_hook import current_principal, current_ticket
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.guards import require_area
from runplane.http.input_checks import decode_json
from runplane.http.lean.sse import sse_response
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.openapi.route_doc import RawBody
from runplane.http.query import accepts_query, integer, resume_seq
from runplane.http.routes.artifacts import public_origin
from runplane.jobs.rows import JobRow
from runplane.problems import FieldProblem, Problem, not_found
from runplane.streams.chunks import TELEOP_MAX_BYTES
from runplane.streams.tickets import Ticket, TicketInvalid
from runplane.streams.views import not_subscribable

blueprint = Blueprint("streams", __name__)


class SubscribeBody(BaseModel):
    """Optional: name the subscriber session a ticket is for (one viewer, several
    streams); a fresh ``sub_`` id otherwise."""

    model_config = ConfigDict(extra="forbid")
    session_id: Annotated[str, StringConstraints(pattern=r"^sub_[A-Za-z0-9]{1,64}$")] | None = None


def _now() -> float:
    return time.time()


def _unauthorized(detail: str) -> Problem:
    return Problem(401, "unauthorized", detail, headers={"WWW-Authenticate": "Bearer"})


async def _visible_row(job_id: str) -> JobRow:
    row = await services().root.records.row(job_id, current_caller().read_org)
    if row is None:
        raise not_found("job")
    return row


async def _ticketed(job_id: str, name: str, ticket: str) -> tuple[JobRow, Ticket]:
    """The job a valid ticket for ``job_id``/``name`` opens, and the ticket's claims (401
    otherwise; 404 when the job is gone or not of the ticket's org)."""
    svc = services()
    try:
        claims = svc.root.streams.check_ticket(ticket, job_id, name, _now())
    except TicketInvalid as exc:
        raise _unauthorized(f"invalid stream ticket: {exc}") from None
    row = await svc.root.records.row(job_id, claims.org_id)
    if row is None:
        raise not_found("job")
    return row, claims


async def _known_stream(row: JobRow, name: str) -> dict[str, Any]:
    view = await services().root.streams.view(row, name)
    if view is None:
        raise not_found("stream")
    return view


def _may_act() -> bool:
    """Whether the caller may drive the job (send teleop frames with its ticket): it may
    submit runs (``runs:submit``), or it is an open deploy's anonymous caller."""
    principal = current_principal()
    if principal.authenticated:
        return principal.has_scope("runs:submit")
    return services().settings.auth != "required"


@blueprint.get("/v1/jobs/<job_id>/streams")
@doc("A job's realtime streams", v.StreamView, many=True, rule=Rule("read", shared=("streams",)))
async def list_streams(job_id: str) -> list[dict[str, Any]]:
    row = await _visible_row(job_id)
    return await services().root.streams.views(row)


@blueprint.post("/v1/jobs/<job_id>/streams/<name>/subscribe")
@doc(
    "A ticket to follow (and maybe drive) a stream",
    v.StreamTicket,
    body=SubscribeBody,
    body_optional=True,
    rule=Rule("read", shared=("streams",)),
)
async def subscribe(job_id: str, name: str) -> dict[str, Any]:
    row = await _visible_row(job_id)
    require_area("streams", "realtime streams")
    view = await _known_stream(row, name)
    streams = services().root.streams
    refusal = not_subscribable(view, hub_runs=streams.runs)
    if refusal is not None:
        raise Problem(
            422,
            "not_subscribable",
            f"stream {name} cannot be subscribed: {refusal}",
            [FieldProblem("name", "not_subscribable", refusal)],
        )
    has_body = bool(await request.get_data(as_text=False))
    body = await parse_body(SubscribeBody) if has_body else SubscribeBody()
    session, ticket, expires = streams.ticket(
        row, name, body.session_id, teleop=_may_act(), now=_now()
    )
    url = f"{public_origin()}/v1/jobs/{row.id}/streams/{name}/data?ticket={ticket}"
    return {
        "session_id": session,
        "transport": view["transport"],
        "ticket": ticket,
        "url": url,
        # additions: when the ticket expires (unix s), and whether it may send teleop
        "expires_at": expires,
        "teleop": _may_act(),
    }


@blueprint.get("/v1/jobs/<job_id>/streams/<name>/data")
@accepts_query("ticket", integer("since_seq"))
@doc(
    "Follow a stream (server-sent events)",
    content="sse",
    events={
        "stream": "a JSON StreamChunk {seq, stream, kind, encoding (json, text, base64), "
        "ts (unix ms), data}",
        "lagged": "a JSON object {dropped, resume_seq}: chunks this subscriber missed",
    },
    errors=(401,),
    # a ticket from subscribe, or (data only) any credential that may read the job
    rule=Rule("read", stream_ticket=True),
)
async def stream_data(job_id: str, name: str) -> Response:
    require_area("streams", "realtime streams")
    ticket = current_ticket()
    if ticket:
        row, claims = await _ticketed(job_id, name, ticket)
        drives = claims.teleop
    else:
        row, drives = await _visible_row(job_id), _may_act()
    await _known_stream(row, name)
    since = resume_seq()
    root = services().root
    frames: AsyncIterator[bytes] = root.streams.follow(row.id, name, since)
    if row.session_id is not None and drives:
        # a driver of a session holds this open: it keeps the session alive meanwhile
        frames = root.sessions.driving(row.session_id, frames)
    return sse_response(frames)  # written by the lean SSE layer when lanes are on


@blueprint.post("/v1/jobs/<job_id>/streams/<name>/teleop")
@accepts_query("ticket")
@doc(
    "Send a teleop frame to a running job",
    v.TeleopResult,
    status=202,
    errors=(400, 401, 403, 409, 413, 502),
    raw_body=RawBody(
        "application/json",
        {"description": f"the control frame: any JSON value of at most {TELEOP_MAX_BYTES} bytes"},
    ),
    # a ticket only (the route refuses a request without one: 401)
    rule=Rule("read", stream_ticket=True),
)
async def teleop(job_id: str, name: str) -> tuple[dict[str, Any], int]:
    require_area("streams", "realtime streams")
    require_area("teleop", "teleop")
    ticket = current_ticket()
    if not ticket:
        raise _unauthorized(
            "teleop needs a stream ticket: POST /v1/jobs/{id}/streams/{name}/subscribe, then "
            "send it as ?ticket= or as the bearer"
        )
    row, claims = await _ticketed(job_id, name, ticket)
    if not claims.teleop:
        raise Problem(
            403,
            "forbidden",
            "this ticket may watch the stream but not drive it: its subscriber cannot submit "
            "runs (scope runs:submit)",
        )
    frame = await _frame()
    result = await services().root.streams.teleop(row.id, name, frame)
    if result.status == 409:
        raise Problem(409, "not_live", f"the run is not live: {result.reason}")
    if result.status == 502:
        raise Problem(502, "teleop_undelivered", f"teleop frame not delivered: {result.reason}")
    return {"delivered": True, "stream": name, "seq": result.seq}, 202


async def _frame() -> str:
    """The posted control frame as compact JSON text (413 past the cap)."""
    length = request.content_length
    if length is not None and length > TELEOP_MAX_BYTES:
        raise _too_big(length)
    raw = await request.get_data(as_text=False)
    if len(raw) > TELEOP_MAX_BYTES:
        raise _too_big(len(raw))
    if not raw:
        raise Problem(400, "missing_body", "send the control frame as a JSON body")
    return json.dumps(decode_json(raw), separators=(",", ":"), ensure_ascii=False)


def _too_big(size: int) -> Problem:
    return Problem(
        413,
        "frame_too_large",
        f"a teleop frame is at most {TELEOP_MAX_BYTES} bytes; this one is {size}",
        [FieldProblem("body", "too_large", f"at most {TELEOP_MAX_BYTES} bytes")],
    )


@blueprint.get("/v1/jobs/<job_id>/recording")
@doc(
    "A job's recording: logs, metrics and stream chunks",
    v.JobRecording,
    rule=Rule("read", shared=("streams", "metrics")),
)
async def recording(job_id: str) -> dict[str, Any]:
    row = await _visible_row(job_id)
    return await services().root.streams.recording(row)
