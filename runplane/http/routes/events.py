"""``GET /v1/jobs/{id}/events``: the job's telemetry as Server-Sent Events.

The follow protocol (store replay, live ring, lag refill, no gap, no repeat, end after the
terminal phase) is ``runplane/jobs/follow.py``; this route parses ``Last-Event-ID`` /
``?since_seq=``, checks the job is visible, and frames each batch: ``id``, ``event``,
``data`` per event, a ``: keepalive`` comment for an idle batch (every 15 s). Each live
event's frame is encoded once (``JobEvent.frame``, shared by all subscribers), and each
batch goes out as one chunk.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from quart import Blueprint, Response

from runplane.auth.rules import Rule
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.lean.sse import sse_response
from runplane.http.openapi import doc
from runplane.http.query import accepts_query, integer, resume_seq
from runplane.jobs.events import JobEvent
from runplane.problems import not_found

blueprint = Blueprint("events", __name__)

KEEPALIVE = b": keepalive\n\n"


def frame(seq: int, kind: str, data: str) -> bytes:
    return f"id: {seq}\nevent: {kind}\ndata: {data}\n\n".encode()


def _frame_of(event: JobEvent) -> bytes:
    """The event's SSE frame, encoded by its first subscriber and shared by the rest."""
    if event.frame is None:
        event.frame = frame(event.seq, event.kind, event.data)
    return event.frame


@blueprint.get("/v1/jobs/<job_id>/events")
@accepts_query(integer("since_seq"))  # and ?token=, which its auth rule allows
@doc(
    "Follow a job (server-sent events: log, metric, phase)",
    content="sse",
    events={
        "phase": "a JSON object {kind: phase, job_id, seq, phase, error, reason?}",
        "log": "a JSON object {kind: log, job_id, seq, stream, line}",
        "metric": "a JSON object {kind: metric, job_id, seq, step, values}",
    },
    # The only route that also accepts ?token= (browser EventSource cannot set headers).
    rule=Rule("read", query_token=True, shared=("logs", "metrics")),
)
async def job_events(job_id: str) -> Response:
    svc = services()
    if await svc.root.records.row(job_id, current_caller().read_org) is None:
        raise not_found("job")
    batches = svc.root.jobs.follow(job_id, resume_seq() or 0)

    async def stream() -> AsyncIterator[bytes]:
        async for batch in batches:
            yield b"".join(_frame_of(e) for e in batch) if batch else KEEPALIVE

    return sse_response(stream())  # written by the lean SSE layer when lanes are on
