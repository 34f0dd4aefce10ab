"""A stream chunk as the server holds and sends it (spec ``StreamChunk``), and the limits
of streams."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

#: Chunks a stream's ring keeps for replay unless ``RUNPLANE_STREAM_RING`` says otherwise.
DEFAULT_RING = 1024
#: Stream chunks a job's recording keeps (``truncated.stream_points`` past it).
RECORDING_CAP = 100_000
#: The largest teleop control frame (its JSON body), bytes.
TELEOP_MAX_BYTES = 256 * 1024
#: Kinds a job may stream; one it opens at run time (not declared by its stack) is ``data``.
KINDS = ("video", "data", "telemetry")


def ring_name(job_id: str, stream: str) -> str:
    return f"stream/{job_id}/{stream}"


@dataclass(slots=True, eq=False)
class StreamChunk:
    """One chunk, numbered per stream from 1. ``frame`` caches its SSE frame (encoded by
    the first subscriber, shared by the rest)."""

    seq: int
    stream: str
    kind: str
    encoding: str
    ts: int
    data: str
    frame: bytes | None = field(default=None, repr=False)

    #: the follow protocol's end marker (a stream ends with its job, not with a chunk)
    end: bool = False

    def view(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "stream": self.stream,
            "kind": self.kind,
            "encoding": self.encoding,
            "ts": self.ts,
            "data": self.data,
        }

    def sse(self) -> bytes:
        if self.frame is None:
            body = json.dumps(self.view(), separators=(",", ":"))
            self.frame = f"id: {self.seq}\nevent: stream\ndata: {body}\n\n".encode()
        return self.frame
