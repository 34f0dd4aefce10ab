"""Stream seqs are reserved before they are published (``runplane/streams/job_streams.py``):
a chunk followers saw but the store never got keeps its seq for ever (found by ``bench
chaos``: a follower saw a seq twice across a takeover)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runplane.jobs import repo
from runplane.persistence.sqlite import SQLiteStore
from runplane.runtime import Hub
from runplane.streams import views
from runplane.streams.chunks import ring_name
from runplane.streams.job_streams import JobStreams

from .test_job_streams import chunks


async def test_a_seq_published_but_never_stored_is_not_given_again(tmp_path: Path) -> None:
    """The server dies (here: its store goes away) between publishing chunks and storing
    them: followers saw those seqs; the actor rebuilt from the row numbers after them."""
    async with SQLiteStore(tmp_path / "db.sqlite") as store:
        await store.execute(
            "INSERT INTO jobs (id, org_id, project, submitted_by, stack, image, phase, "
            "priority, mode, seed, spec_hash, spec, attempt, attempts, final_metrics, "
            "artifacts, event_seq, log_lines, log_dropped, created_at, updated_at) VALUES "
            "('job_x', 'org_default', '', 'u', 'shell', 'i', 'running', 100, 'run', 0, 'h', "
            "'{}', 1, 0, '{}', '[]', 0, 0, 0, 0, 0)",
            (),
        )
        hub = Hub()
        first = JobStreams("job_x", store, hub, declared={"t": "data"})
        await first.receive("t", chunks(1, 2))
        ring = hub.find_ring(ring_name("job_x", "t"))
        assert ring is not None
        await store.close()  # the next write fails, after the chunk is published
        with pytest.raises(Exception):  # noqa: B017 - whatever a closed store raises
            await first.receive("t", chunks(3))
        seen = [s for s, _ in ring.retained()]
        assert seen == [1, 2, 3]  # a follower saw seq 3; the store never got it
    async with SQLiteStore(tmp_path / "db.sqlite") as store:
        row = await repo.get_row(store, "job_x", None)
        assert row is not None
        rebuilt = JobStreams("job_x", store, Hub(), declared={"t": "data"}, saved=row.streams)
        (chunk,) = await rebuilt.receive("t", chunks(4))
        assert chunk.seq > max(seen)
        stored = await views.stored_chunks(store, "job_x", "t")
        assert [c.seq for c in stored] == [1, 2, chunk.seq]
