"""What the retention janitor deletes, as SQL (``runplane/actors/janitor.py``; docs/
operations.md "Retention"): a finished job's log lines and metric points (``job_events``
of kind ``log`` and ``metric``) and its stream points, in bounded chunks so no transaction
holds the writer long. The job row, its phase events and its final metrics stay; the row's
``purged_at`` says when the rest went."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runplane.jobs.phase import TERMINAL
from runplane.persistence import Store

DAY_MS = 24 * 3600 * 1000
#: Most rows one delete statement (one transaction) removes.
DELETE_CHUNK = 2000


@dataclass(frozen=True, slots=True)
class Expired:
    id: str
    event_seq: int


async def expired(
    store: Store,
    cutoff_ms: int,
    *,
    org_id: str | None = None,
    exclude: Sequence[str] = (),
    limit: int = 100,
) -> list[Expired]:
    """Finished jobs that ended before ``cutoff_ms`` and are not purged yet, oldest first:
    of ``org_id`` only, or (None) of every org but those in ``exclude``."""
    ended = ", ".join("?" * len(TERMINAL))
    sql = (
        "SELECT id, event_seq FROM jobs WHERE purged_at IS NULL AND finished_at IS NOT NULL "
        f"AND finished_at < ? AND phase IN ({ended})"
    )
    params: list[object] = [cutoff_ms, *(p.value for p in TERMINAL)]
    if org_id is not None:
        sql += " AND org_id = ?"
        params.append(org_id)
    elif exclude:
        sql += f" AND org_id NOT IN ({', '.join('?' * len(exclude))})"
        params += list(exclude)
    rows = await store.fetchall(sql + " ORDER BY finished_at LIMIT ?", (*params, limit))
    return [Expired(str(r["id"]), int(r["event_seq"])) for r in rows]


async def purge_events(store: Store, job: Expired) -> int:
    """Delete the job's log lines and metric points, ``DELETE_CHUNK`` seqs at a time."""
    deleted = 0
    for low in range(0, job.event_seq, DELETE_CHUNK):
        deleted += await store.execute(
            "DELETE FROM job_events WHERE job_id = ? AND seq > ? AND seq <= ? "
            "AND kind IN ('log', 'metric')",
            (job.id, low, low + DELETE_CHUNK),
        )
    return deleted


async def purge_stream_points(store: Store, job_id: str) -> int:
    """Delete the job's stream points (the recording), ``DELETE_CHUNK`` seqs at a time."""
    row = await store.fetchone(
        "SELECT MAX(seq) AS top FROM stream_points WHERE job_id = ?", (job_id,)
    )
    top = int(row["top"]) if row and row["top"] is not None else 0
    deleted = 0
    for low in range(0, top, DELETE_CHUNK):
        deleted += await store.execute(
            "DELETE FROM stream_points WHERE job_id = ? AND seq > ? AND seq <= ?",
            (job_id, low, low + DELETE_CHUNK),
        )
    return deleted


async def mark_purged(store: Store, job_id: str, now: int) -> None:
    await store.execute("UPDATE jobs SET purged_at = ? WHERE id = ?", (now, job_id))


async def purged_at(store: Store, job_id: str) -> int | None:
    row = await store.fetchone("SELECT purged_at FROM jobs WHERE id = ?", (job_id,))
    return int(row["purged_at"]) if row and row["purged_at"] is not None else None
