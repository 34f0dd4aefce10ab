"""What the retention janitor deletes (``runplane/actors/janitor.py``; docs/operations.md
"Retention"): a finished job's log lines and metric points (``job_events`` of kind ``log``
and ``metric``) and its stream points, in bounded chunks so no transaction holds the
writer long. The job row, its phase events and its final metrics stay; the row's
``purged_at`` (``repo.mark_purged``) says when the rest went. The writes are the tables'
owners': ``runplane/jobs/repo.py`` (job events, ``purged_at``) and
``runplane/streams/job_streams.py`` (stream points)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runplane.jobs import repo
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
    return await repo.purge_events(store, job.id, job.event_seq, DELETE_CHUNK)


async def purged_at(store: Store, job_id: str) -> int | None:
    row = await store.fetchone("SELECT purged_at FROM jobs WHERE id = ?", (job_id,))
    return int(row["purged_at"]) if row and row["purged_at"] is not None else None
