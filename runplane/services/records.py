"""The job records service: what routes read of stored jobs (rows, their log and metric
events, the report marks an agent resumes from, the retention stamp, analytics), from
the tables' owners (``runplane/jobs/repo.py``, ``runplane/jobs/retention.py``,
``runplane/jobs/analytics.py``). Writes go through the job actors (``Jobs``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from runplane.jobs import analytics, repo, retention
from runplane.jobs.events import StoredEvent
from runplane.jobs.rows import JobRow
from runplane.persistence import Store, now_ms


class JobRecords:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def row(self, job_id: str, org_id: str | None) -> JobRow | None:
        """The job, if ``org_id`` may see it (None: every org)."""
        return await repo.get_row(self.store, job_id, org_id)

    async def events(
        self, job_id: str, after_seq: int, *, limit: int, kinds: Sequence[str] = ()
    ) -> list[StoredEvent]:
        return await repo.events_after(self.store, job_id, after_seq, limit=limit, kinds=kinds)

    async def report_marks(self, held: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Where a connecting agent resumes each attempt it holds (``repo.report_marks``)."""
        return await repo.report_marks(self.store, held)

    async def purged_at(self, job_id: str) -> int | None:
        """When the retention janitor purged the job (None: not purged, or no such job)."""
        return await retention.purged_at(self.store, job_id)

    async def analytics(
        self, org_id: str | None, window_ms: int, buckets: int, asked: str
    ) -> dict[str, Any]:
        """JobAnalytics over the window ending now."""
        return await analytics.job_analytics(
            self.store, org_id, window_ms, buckets, now_ms(), asked
        )
