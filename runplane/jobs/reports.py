"""What the job actor makes of an agent's reports: the ArtifactRefs it keeps (well formed,
under the job's own key prefix) and the system line of an attempt that starts, is lost,
or is retried (in the Job view's words)."""

from __future__ import annotations

import logging
import re
from typing import Any

from runplane.jobs.phase import Event as PhaseEvent
from runplane.jobs.phase import (
    Finished,
    JobState,
    NodeLost,
    Phase,
    Preempted,
    RetryDue,
    Undelivered,
)

log = logging.getLogger("runplane.jobs")


#: Most ArtifactRefs one job records (the agent uploads at most as many outputs).
MAX_ARTIFACTS = 10_000
_SHA256_HEX = re.compile(r"^[0-9a-f]{64}$")


def checked_artifacts(job_id: str, items: Any) -> list[dict[str, Any]]:
    """The agent's ArtifactRefs that are well formed and under this job's own key prefix
    (an agent cannot claim another job's artifacts); the rest are dropped with a warning."""
    prefix = f"/v1/artifacts/{job_id}/"
    kept: list[dict[str, Any]] = []
    dropped = 0
    for item in list(items or ())[: MAX_ARTIFACTS + 1]:
        try:
            ref = item["ref"]
            entry = {
                "artifact": str(item["artifact"])[:256],
                "ref": ref,
                "sha256": item["sha256"],
                "size": item["size"],
            }
            valid = (
                isinstance(ref, str)
                and ref.startswith(prefix)
                and len(ref) > len(prefix)
                and ".." not in ref.split("/")
                and isinstance(entry["sha256"], str)
                and bool(_SHA256_HEX.match(entry["sha256"]))
                and isinstance(entry["size"], int)
                and not isinstance(entry["size"], bool)
                and entry["size"] >= 0
            )
        except (KeyError, TypeError):
            valid = False
        if valid and len(kept) < MAX_ARTIFACTS:
            kept.append(entry)
        else:
            dropped += 1
    if dropped:
        log.warning("agent artifacts dropped", extra={"job_id": job_id, "dropped": dropped})
    return kept


def attempt_note(before: JobState, after: JobState, event: PhaseEvent) -> str | None:
    """The system line of an attempt that starts or is lost, in the Job view's words:
    ``attempt`` is the run number (1-based), ``attempts`` the requeues so far."""
    if before.phase is Phase.QUEUED and after.phase is Phase.ASSIGNED:
        try_ = f" (try {after.retries + 1})" if after.retries else ""
        return (
            f"attempt {after.attempt}{try_} on {after.node_id} (requeues so far: {after.attempts})"
        )
    if isinstance(event, NodeLost) and after.phase is Phase.QUEUED:
        return (
            f"attempt {before.attempt} requeued (requeues so far: {after.attempts}): {event.reason}"
        )
    if isinstance(event, Undelivered):
        return f"attempt {before.attempt} never started: {event.reason}; back in the queue"
    if isinstance(event, Finished) and after.phase is Phase.QUEUED:
        why = f": {event.error}" if event.error else ""
        return (
            f"try {after.retries} {event.outcome.value}{why}; retry {after.retries} "
            f"(try {after.retries + 1}) after a {(event.retry_in_ms or 0) / 1000:g} s backoff"
        )
    if isinstance(event, Preempted):
        return (
            f"attempt {before.attempt} preempted by {event.by} (preemptions so far: "
            f"{after.preemptions}); back in the queue"
        )
    if isinstance(event, RetryDue):
        return f"retry {after.retries}: try {after.retries + 1} goes back in the queue"
    return None
