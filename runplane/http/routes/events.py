"""``GET /v1/jobs/{id}/events``: the job's telemetry as Server-Sent Events.

A subscriber first gets the job's history from the store (everything after
``Last-Event-ID`` / ``?since_seq=``), then follows the job's ring in the hub for the live
tail. Every event is stored before it is published, so the two meet without a gap; events
the subscriber already has (seq <= last sent) are skipped, so nothing repeats. A subscriber
that falls behind the ring (``Lagged``) refills from the store. ``: keepalive`` comments go
out every 15 s while idle; the stream ends after the terminal ``phase`` event.

Cost per subscriber is kept to a join and a write: each live event's frame is encoded once
(``JobEvent.frame``, shared by all subscribers), and everything ready when a subscriber
wakes goes out as one chunk (a page per write during replay).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import trio
from quart import Blueprint, Response, request

from runplane.actors.job import JobEvent, ring_name
from runplane.actors.jobs import JOB_KIND
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.jobs import repo
from runplane.jobs.phase import Phase
from runplane.problems import FieldProblem, Problem, not_found
from runplane.runtime import Lagged

blueprint = Blueprint("events", __name__)

KEEPALIVE_SEC = 15.0
REPLAY_PAGE = 1000
#: Most live events one write carries (whatever is ready when the subscriber wakes).
LIVE_BATCH = 512
TERMINAL = frozenset(p.value for p in Phase if p.terminal)


def _since() -> int:
    raw = request.headers.get("Last-Event-ID") or request.args.get("since_seq") or "0"
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise Problem(
            400,
            "invalid_query",
            "Last-Event-ID / since_seq must be a seq (int >= 0)",
            [FieldProblem("since_seq", "invalid", "an integer >= 0")],
        )
    return value


def frame(seq: int, kind: str, data: str) -> bytes:
    return f"id: {seq}\nevent: {kind}\ndata: {data}\n\n".encode()


def _frame_of(event: JobEvent) -> bytes:
    """The event's SSE frame, encoded by its first subscriber and shared by the rest."""
    if event.frame is None:
        event.frame = frame(event.seq, event.kind, event.data)
    return event.frame


@blueprint.get("/v1/jobs/<job_id>/events")
async def job_events(job_id: str) -> Response:
    svc = services()
    if await repo.get_row(svc.store, job_id, current_caller().read_org) is None:
        raise not_found("job")
    since = _since()

    async def stream() -> AsyncIterator[bytes]:
        last = since
        ended = False

        async def replay() -> AsyncIterator[bytes]:
            """Stored events after ``last``, one chunk per page."""
            nonlocal last, ended
            while not ended:
                rows = await repo.events_after(svc.store, job_id, last, limit=REPLAY_PAGE)
                chunk = []
                for row in rows:
                    last = row["seq"]
                    chunk.append(frame(row["seq"], row["kind"], row["data"]))
                    if row["kind"] == "phase" and json.loads(row["data"])["phase"] in TERMINAL:
                        ended = True
                        break
                if chunk:
                    yield b"".join(chunk)
                if ended or len(rows) < REPLAY_PAGE:
                    return

        async for chunk in replay():
            yield chunk
        if ended:
            return
        ring = svc.root.hub.find_ring(ring_name(job_id))
        if ring is None:  # live job whose actor is not active yet: activate it
            await svc.root.registry.get(JOB_KIND, job_id)
            ring = svc.root.hub.ring(ring_name(job_id))
        with ring.subscribe(from_seq=last) as cursor:
            async for chunk in replay():  # what was stored between replay and subscribe
                yield chunk
            while not ended:
                got: list[tuple[int, JobEvent]] = []
                lagged = finished = False
                with trio.move_on_after(KEEPALIVE_SEC):
                    try:
                        got = await cursor.receive_many(LIVE_BATCH)
                    except Lagged:
                        lagged = True
                    except trio.EndOfChannel:
                        finished = True
                if lagged or finished:  # refill from the store (and the terminal event)
                    async for chunk in replay():
                        yield chunk
                    if finished:
                        return
                    continue
                if not got:
                    yield b": keepalive\n\n"
                    continue
                frames = []
                for seq, event in got:  # every event ready now goes out in one write
                    if seq <= last:
                        continue
                    last = seq
                    frames.append(_frame_of(event))
                    if event.end:
                        ended = True
                        break
                if frames:
                    yield b"".join(frames)

    response = Response(stream(), content_type="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    response.timeout = None  # type: ignore[assignment]
    return response
