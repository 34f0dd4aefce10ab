"""The job analytics rollup (``job_counts``, migration 0013): per org and per minute, the
jobs submitted and the jobs that ended succeeded, failed (failed + timeout) or cancelled,
plus org ``*`` for every org's total. Written in the same transaction as the job's insert
and its terminal transition, so the counts are exact; read by ``analytics.py``."""

from __future__ import annotations

from runplane.persistence import Store, Tx

MINUTE_MS = 60_000
ALL_ORGS = "*"
#: A terminal job phase -> the counter it adds to.
ENDED = {
    "succeeded": "succeeded",
    "failed": "failed",
    "timeout": "failed",
    "cancelled": "cancelled",
}
COUNTERS = ("submitted", "succeeded", "failed", "cancelled")
_SQL = {
    column: (
        "INSERT INTO job_counts (org_id, minute, submitted, succeeded, failed, cancelled) "
        "VALUES (?,?,?,?,?,?), (?,?,?,?,?,?) ON CONFLICT (org_id, minute) DO UPDATE SET "
        f"{column} = job_counts.{column} + excluded.{column}"
    )
    for column in COUNTERS
}


def count_many(tx: Tx, org_id: str, at_ms: int, counter: str, n: int) -> None:
    """Add ``n`` to ``counter`` for ``org_id`` and every org in the minute of ``at_ms``, in
    one statement (a submit, or a job array's: not two statements per job)."""
    minute = at_ms // MINUTE_MS
    values = tuple(n if c == counter else 0 for c in COUNTERS)
    tx.execute(_SQL[counter], (org_id, minute, *values, ALL_ORGS, minute, *values))


def count(tx: Tx, org_id: str, at_ms: int, counter: str) -> None:
    """Add one to ``counter`` for ``org_id`` (and every org) in the minute of ``at_ms``."""
    count_many(tx, org_id, at_ms, counter, 1)


_BACKFILL = (
    "INSERT INTO job_counts (org_id, minute, submitted, succeeded, failed, cancelled) "
    "SELECT org_id, minute, SUM(submitted), SUM(succeeded), SUM(failed), SUM(cancelled) FROM ("
    " SELECT org_id, created_at / 60000 AS minute, 1 AS submitted, 0 AS succeeded,"
    " 0 AS failed, 0 AS cancelled FROM jobs"
    " UNION ALL"
    " SELECT org_id, finished_at / 60000 AS minute, 0 AS submitted,"
    " CASE WHEN phase = 'succeeded' THEN 1 ELSE 0 END AS succeeded,"
    " CASE WHEN phase IN ('failed', 'timeout') THEN 1 ELSE 0 END AS failed,"
    " CASE WHEN phase = 'cancelled' THEN 1 ELSE 0 END AS cancelled FROM jobs"
    " WHERE finished_at IS NOT NULL"
    " AND phase IN ('succeeded', 'failed', 'timeout', 'cancelled')"
    ") AS happened GROUP BY org_id, minute"
)
_BACKFILL_ALL = (
    "INSERT INTO job_counts (org_id, minute, submitted, succeeded, failed, cancelled) "
    "SELECT ?, minute, SUM(submitted), SUM(succeeded), SUM(failed), SUM(cancelled) "
    "FROM job_counts GROUP BY minute"
)


async def backfill(store: Store) -> bool:
    """Fill an empty rollup from the jobs stored (a deploy upgraded to it, or jobs written
    without it); True when it did. One transaction: readers see all of it or none."""
    if await store.fetchone("SELECT 1 AS x FROM job_counts LIMIT 1") is not None:
        return False
    if await store.fetchone("SELECT 1 AS x FROM jobs LIMIT 1") is None:
        return False

    def fill(tx: Tx) -> None:
        tx.execute(_BACKFILL)
        tx.execute(_BACKFILL_ALL, (ALL_ORGS,))

    await store.transaction(fill)
    return True
