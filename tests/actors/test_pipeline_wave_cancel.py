"""A wide pipeline wave is created in chunks with the actor's mailbox served between them
(issue 42 item 6, docs/pipelines.md "Waves"): a cancel queued while the first chunk is
being created is answered before the next chunk, the rest of the wave is never created,
and what was created is cancelled, leaving no stage running. The order is the mailbox's
(the cancel is queued behind the first chunk's Advance and ahead of the second's), not a
timing. Also: a wave wider than a chunk is created completely when nothing interrupts it,
one transaction per chunk."""

from __future__ import annotations

from pathlib import Path

import pytest

from runplane.actors.pipeline import PIPELINES, WAVE_CHUNK, Cancel, Launching, Sync
from runplane.jobs import repo as job_repo
from runplane.jobs.jobspec import spec_hash
from runplane.persistence import Store
from runplane.pipelines import repo
from runplane.pipelines.machine import Status

from .harness import WHO, running_root, store

__all__ = ["store"]  # the fixture, parametrized over SQLite and PostgreSQL

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

WIDTH = 300  # six chunks


def wide_run(run_id: str, width: int = WIDTH) -> repo.NewRun:
    body = {"stack": "shell", "command": ["true"], "project": "wave"}
    return repo.NewRun(
        id=run_id,
        org_id=WHO.org_id,
        project="wave",
        name="wide",
        submitted_by=WHO.subject,
        origin="http://127.0.0.1",
        stages=[(f"s{i}", [], False, "shell", body) for i in range(width)],
    )


async def test_a_cancel_during_a_wide_wave_stops_it_and_leaves_no_stage_running(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path, max_concurrent_org="1000") as (root, _agents):
        await store.transaction(repo.insert_run(wide_run("plr_wave")))
        # the cancel activates the run's actor, whose start queues the first chunk's
        # Advance; the Cancel is queued right behind it, ahead of the second chunk's
        view = await root.pipelines.cancel("plr_wave", None)
        assert view["status"] == Status.CANCELLED.value
        assert view["progress"]["cancelled"] == WIDTH  # created and killed, or never created
        assert not view["progress"]["queued"] and not view["progress"]["running"]
        # one chunk was created, not the wave, and nothing more after the cancel
        await root.registry.ask(PIPELINES, "plr_wave", Sync())
        assert not await root.registry.ask(PIPELINES, "plr_wave", Launching())
        jobs = await repo.stage_jobs(store, "plr_wave")
        assert len(jobs) == WAVE_CHUNK < WIDTH
        assert {j["phase"] for j in jobs} == {"cancelled"}  # no stage job left running
        stages = await repo.get_stages(store, "plr_wave")
        launched = {s.stage.name: s.stage.job_id for s in stages if s.stage.job_id}
        assert launched == {j["stage"]: j["id"] for j in jobs}
        assert {s.stage.phase.value for s in stages} == {"cancelled"}
        # a second cancel answers the run as it is and kills nothing
        assert await root.registry.ask(PIPELINES, "plr_wave", Cancel()) == ()


async def test_a_wave_wider_than_a_chunk_is_created_whole(store: Store, tmp_path: Path) -> None:
    async with running_root(store, tmp_path, max_concurrent_org="1000") as (root, _agents):
        await store.transaction(repo.insert_run(wide_run("plr_whole")))
        await root.registry.get(PIPELINES, "plr_whole")
        while await root.registry.ask(PIPELINES, "plr_whole", Launching()):
            pass  # one chunk per round
        await root.registry.ask(PIPELINES, "plr_whole", Sync())
        jobs = await repo.stage_jobs(store, "plr_whole")
        assert sorted(j["stage"] for j in jobs) == sorted(f"s{i}" for i in range(WIDTH))
        assert {j["phase"] for j in jobs} == {"queued"}
        run = await repo.get_run(store, "plr_whole", None)
        assert run is not None and run.status is Status.RUNNING
        assert run.progress["queued"] == WIDTH
        # planned once per distinct body, each job still hashed as a single submit's
        row = await job_repo.get_row(store, jobs[-1]["id"], None)
        assert row is not None and row.spec_hash == spec_hash(row.spec)
        assert (row.pipeline_run_id, row.stage, row.stage_retry) == (
            "plr_whole",
            jobs[-1]["stage"],
            0,
        )


async def test_the_quota_is_applied_per_stage_job_within_a_chunk(
    store: Store, tmp_path: Path
) -> None:
    """150 fit: the first chunk is admitted whole, the second up to the 150th job (the
    gate takes it one job at a time once it refuses the chunk); the rest wait pending
    with the refusal as their reason, none of them created."""
    async with running_root(store, tmp_path, max_concurrent_org="150") as (root, _agents):
        await store.transaction(repo.insert_run(wide_run("plr_quota")))
        await root.registry.get(PIPELINES, "plr_quota")
        while await root.registry.ask(PIPELINES, "plr_quota", Launching()):
            pass
        await root.registry.ask(PIPELINES, "plr_quota", Sync())
        jobs = await repo.stage_jobs(store, "plr_quota")
        assert sorted(j["stage"] for j in jobs) == sorted(f"s{i}" for i in range(150))
        stages = {s.stage.name: s.stage for s in await repo.get_stages(store, "plr_quota")}
        waiting = [s for s in stages.values() if s.phase.value == "pending"]
        assert len(waiting) == WIDTH - 150
        assert all(s.reason and "max_concurrent_org" in s.reason for s in waiting)
        assert all(s.job_id is None for s in waiting)
