"""What the API shows of a job's streams: StreamView (declared by its stack, a session's
teleop stream, or opened by the job at run time), the stored chunks, and JobRecording."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from runplane.jobs import repo as jobs_repo
from runplane.jobs.rows import JobRow
from runplane.persistence import Store
from runplane.stacks.models import StreamSpec

from .chunks import StreamChunk
from .job_streams import StreamState, parse_saved

#: What a video stream's view says until a media relay exists.
VIDEO_NOTE = (
    "video streams are listed but not relayed yet (transport webrtc): subscribe to a data "
    "or telemetry stream"
)
SUBSCRIBABLE_KINDS = ("data", "telemetry")
#: What a session's teleop stream is (``with_teleop_stream``).
TELEOP_NOTE = "the session's teleop stream: frames posted to its teleop route drive the pod"
#: Log lines and metric points a recording reads (the store keeps at most 50,000 lines).
RECORDING_EVENTS = 200_000


def states_of(row: JobRow) -> dict[str, StreamState]:
    return parse_saved(row.streams)


def with_teleop_stream(declared: Sequence[StreamSpec], name: str) -> list[StreamSpec]:
    """``declared`` (a session pod job's stack streams) and the session's teleop stream
    ``name``: a data stream over SSE, declared from the session's start, so it is listed,
    subscribable and drivable before the pod writes to it; a stack stream of that name
    stands as the stack declares it."""
    if any(spec.name == name for spec in declared):
        return list(declared)
    teleop = StreamSpec(name=name, kind="data", transport="sse", description=TELEOP_NOTE)
    return [*declared, teleop]


def stream_views(
    declared: Sequence[StreamSpec], states: dict[str, StreamState], *, hub_runs: bool
) -> list[dict[str, Any]]:
    """The stack's streams in manifest order, then the ones the job opened, by name."""
    views: list[dict[str, Any]] = []
    seen: set[str] = set()
    for spec in declared:
        seen.add(spec.name)
        count = states[spec.name].count if spec.name in states else 0
        views.append(
            _view(
                spec.name,
                spec.kind,
                spec.enabled,
                spec.transport_or_default,
                spec.fps,
                spec.width,
                spec.height,
                count,
                hub_runs,
            )
        )
    for name in sorted(set(states) - seen):
        state = states[name]
        views.append(_view(name, state.kind, True, "sse", 0, 0, 0, state.count, hub_runs))
    return views


def _view(
    name: str,
    kind: str,
    enabled: bool,
    transport: str,
    fps: int,
    width: int,
    height: int,
    count: int,
    hub_runs: bool,
) -> dict[str, Any]:
    view: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "enabled": enabled,
        "transport": transport,
        "fps": fps,
        "width": width,
        "height": height,
        "subscribable": bool(enabled and kind in SUBSCRIBABLE_KINDS and hub_runs),
        # additions: chunks received so far; why a video stream cannot be subscribed
        "count": count,
    }
    if kind == "video":
        view["note"] = VIDEO_NOTE
    return view


def not_subscribable(view: dict[str, Any], *, hub_runs: bool) -> str | None:
    """Why a subscribe to ``view``'s stream is refused; None when it may be."""
    if not hub_runs:
        return "streams are disabled on this server"
    if view["kind"] == "video":
        return VIDEO_NOTE
    if not view["enabled"]:
        return f"stream {view['name']} is disabled in its stack's manifest"
    return None


async def stored_chunks(
    store: Store, job_id: str, stream: str | None = None, *, last: int | None = None
) -> list[StreamChunk]:
    """Chunks kept for the recording, in order (of one stream, or every one by time); with
    ``last``, only the newest ``last`` of the stream."""
    if stream is not None and last is not None:
        rows = await store.fetchall(
            "SELECT stream, seq, kind, encoding, ts, data FROM stream_points "
            "WHERE job_id = ? AND stream = ? ORDER BY seq DESC LIMIT ?",
            (job_id, stream, last),
        )
        rows = list(reversed(rows))
    elif stream is not None:
        rows = await store.fetchall(
            "SELECT stream, seq, kind, encoding, ts, data FROM stream_points "
            "WHERE job_id = ? AND stream = ? ORDER BY seq",
            (job_id, stream),
        )
    else:
        rows = await store.fetchall(
            "SELECT stream, seq, kind, encoding, ts, data FROM stream_points "
            "WHERE job_id = ? ORDER BY ts, stream, seq",
            (job_id,),
        )
    return [
        StreamChunk(
            seq=r["seq"],
            stream=r["stream"],
            kind=r["kind"],
            encoding=r["encoding"],
            ts=r["ts"],
            data=r["data"],
        )
        for r in rows
    ]


async def recording(store: Store, row: JobRow) -> dict[str, Any]:
    """The JobRecording of ``row``: metrics and logs stamped with their receive time,
    its streams with their chunk counts (when it had any), the stored chunks."""
    events = await jobs_repo.events_after(
        store, row.id, 0, limit=RECORDING_EVENTS, kinds=("log", "metric")
    )
    metrics: list[dict[str, Any]] = []
    logs: list[dict[str, Any]] = []
    for event in events:
        data = json.loads(event.data)
        if event.kind == "metric":
            metrics.append({"ts": event.ts, "step": data.get("step"), "values": data["values"]})
        else:
            logs.append({"ts": event.ts, "stream": data.get("stream"), "line": data.get("line")})
    states = states_of(row)
    body: dict[str, Any] = {
        "job_id": row.id,
        "phase": row.phase.value,
        "started_at": row.started_at,
        "ended_at": row.finished_at,
        "metrics": metrics,
        "logs": logs,
    }
    if states:
        body["streams"] = [
            {"name": name, "kind": s.kind, "count": s.count} for name, s in sorted(states.items())
        ]
    points = await stored_chunks(store, row.id)
    body["stream_points"] = [c.view() for c in points]
    total = sum(s.count for s in states.values())
    body["truncated"] = {"stream_points": total > len(points)}
    return body
