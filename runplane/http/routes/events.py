"""``GET /v1/jobs/{id}/events``: the job's telemetry as Server-Sent Events.

A subscriber first gets the job's history from the store (everything after
``Last-Event-ID`` / ``?since_seq=``), then follows the job's ring in the hub for the live
tail. Every event is stored before it is published, so the two meet without a gap; events
the subscriber already has (seq <= last sent) are skipped, so nothing repeats. A subscriber
that falls behind the ring (``Lagged``) refills from the store. ``: keepalive`` comments go
out every 15 s while idle; the stream ends after the terminal ``phase`` event.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import trio
from quart import Blueprint, Response, request

from runplane.actors.job import ring_name
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


def _is_end(kind: str, payload: dict[str, Any]) -> bool:
    return kind == "phase" and payload.get("phase") in TERMINAL


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
            nonlocal last, ended
            while not ended:
                rows = await repo.events_after(svc.store, job_id, last, limit=REPLAY_PAGE)
                for row in rows:
                    last = row["seq"]
                    yield frame(row["seq"], row["kind"], row["data"])
                    if row["kind"] == "phase" and json.loads(row["data"])["phase"] in TERMINAL:
                        ended = True
                        return
                if len(rows) < REPLAY_PAGE:
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
                got: tuple[int, dict[str, Any]] | None = None
                lagged = finished = False
                with trio.move_on_after(KEEPALIVE_SEC):
                    try:
                        got = await cursor.receive()
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
                if got is None:
                    yield b": keepalive\n\n"
                    continue
                seq, payload = got
                if seq <= last:
                    continue
                last = seq
                kind = payload["kind"]
                yield frame(seq, kind, json.dumps(payload, separators=(",", ":"), sort_keys=True))
                if _is_end(kind, payload):
                    return

    response = Response(stream(), content_type="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    response.timeout = None  # type: ignore[assignment]
    return response
