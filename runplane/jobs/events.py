"""A job's telemetry events: the one stored-event type, its one encoder, and ring items.

Every event a job emits (a ``phase`` change, a ``log`` line, a ``metric`` point) is a row
of ``job_events``: :class:`StoredEvent`, whose ``data`` is the SSEEvent JSON, encoded once
here by the job actor and never again (the store keeps it, SSE and ``/logs`` send it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NamedTuple

from runplane.persistence import to_json

from .phase import TERMINAL, Phase


class StoredEvent(NamedTuple):
    """One row of ``job_events``; ``data`` is the event's SSEEvent JSON."""

    job_id: str
    seq: int
    kind: str  # phase | log | metric
    ts: int  # unix ms
    data: str

    @property
    def ends_stream(self) -> bool:
        """The job's terminal phase event: nothing follows it."""
        return self.kind == "phase" and json.loads(self.data)["phase"] in TERMINAL  # (a StrEnum)


def encode(job_id: str, seq: int, kind: str, ts: int, **fields: Any) -> StoredEvent:
    """The event ``kind`` number ``seq`` of ``job_id`` with its SSEEvent payload."""
    payload = {"kind": kind, "job_id": job_id, "seq": seq, **fields}
    return StoredEvent(job_id, seq, kind, ts, to_json(payload))


def phase_event(
    job_id: str,
    seq: int,
    phase: str,
    ts: int,
    error: str | None = None,
    retry: int = 0,
    placed: tuple[str, int] | None = None,
    preempted_by: str | None = None,
) -> StoredEvent:
    """A phase change. Additions: ``retry`` numbers the retry a ``queued`` event starts,
    so a follower sees where each try of a job with a retry policy begins; ``placed``
    gives an ``assigned`` event its ``node_id`` and ``attempt``, so the timeline says
    which node ran each attempt."""
    fields: dict[str, Any] = {"phase": phase}
    if error:
        fields["error"] = error
    if retry:
        fields["retry"] = retry
    if placed is not None:
        fields["node_id"], fields["attempt"] = placed
    if preempted_by is not None:  # docs/placement.md "Preemption"
        fields["reason"], fields["by"] = "preempted", preempted_by
    return encode(job_id, seq, "phase", ts, **fields)


def wait_reason_event(job_id: str, seq: int, reason: str, ts: int) -> StoredEvent:
    """A queued job's wait reason changed: a ``phase`` event that repeats ``queued`` and
    carries placement's ``reason`` (not a transition; SSE keeps its three event kinds)."""
    return encode(job_id, seq, "phase", ts, phase=Phase.QUEUED.value, reason=reason)


def log_event(
    job_id: str,
    seq: int,
    stream: str,
    line: str,
    ts: int,
    service: str | None = None,
    rank: int | None = None,
) -> StoredEvent:
    """A log line; a line of a session pod's service carries the service's name, one of a
    gang's rank its ``rank`` (docs/jobs.md "Multi-node jobs")."""
    extra: dict[str, Any] = {}
    if service is not None:
        extra["service"] = service
    if rank is not None:
        extra["rank"] = rank
    return encode(job_id, seq, "log", ts, stream=stream, line=line, **extra)


def system_line_event(job_id: str, seq: int, line: str, ts: int) -> StoredEvent:
    return log_event(job_id, seq, "system", line, ts)


def metric_event(
    job_id: str,
    seq: int,
    step: int | None,
    values: dict[str, float],
    ts: int,
    rank: int | None = None,
) -> StoredEvent:
    """A metric report; a gang's rank's carries its ``rank``."""
    extra: dict[str, Any] = {} if rank is None else {"rank": rank}
    if step is None:
        return encode(job_id, seq, "metric", ts, values=values, **extra)
    return encode(job_id, seq, "metric", ts, values=values, step=step, **extra)


@dataclass(slots=True)
class JobEvent:
    """What the job's ring carries: one stored event. ``frame`` is left for the SSE
    follower to fill once, so a thousand subscribers share one encoding."""

    seq: int
    kind: str
    data: str
    end: bool = False  # the terminal phase event: the stream ends after it
    frame: bytes | None = None

    @classmethod
    def of(cls, event: StoredEvent, *, end: bool = False) -> JobEvent:
        return cls(seq=event.seq, kind=event.kind, data=event.data, end=end)


def ring_name(job_id: str) -> str:
    return f"job/{job_id}"
