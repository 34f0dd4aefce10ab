"""The row a submit hands to the job actor is exactly the row the store holds."""

from __future__ import annotations

from runplane.jobs import repo
from runplane.jobs.phase import Phase
from runplane.jobs.spec import SubmitJobBody, resolve
from runplane.persistence import Store
from runplane.stacks import load_catalog


async def test_inserted_row_equals_the_stored_row(store: Store) -> None:
    resolved = resolve(SubmitJobBody(stack="shell", seed=5, project="p"), load_catalog())
    job = repo.NewJob(
        id="job_test1",
        org_id="org_x",
        project=resolved.project,
        submitted_by="u",
        spec=resolved.spec,
        spec_hash=resolved.spec_hash,
        priority=7,
        idempotency_key="k1",
        idempotency_hash="h1",
    )
    inserted = await store.transaction(repo.insert_job(store, job))
    stored = await repo.get_row(store, "job_test1", None)
    assert isinstance(inserted, repo.JobRow)
    assert inserted == stored
    assert stored.phase is Phase.QUEUED and stored.spec == resolved.spec
    assert (stored.final_metrics, stored.artifacts, stored.run) == ({}, [], None)
    assert [r.id for r in await repo.live_rows(store)] == ["job_test1"]
    replay = await store.transaction(repo.insert_job(store, job))
    assert replay == "job_test1"  # the same key and body: the first job's id


def test_a_row_reads_the_same_from_text_and_from_decoded_json() -> None:
    resolved = resolve(SubmitJobBody(stack="shell", seed=5), load_catalog())
    run = {"stack": "shell", "has_runspec": True}
    job = repo.NewJob(
        id="job_test2",
        org_id="org_x",
        project="",
        submitted_by="u",
        spec=resolved.spec,
        spec_hash=resolved.spec_hash,
        priority=0,
        run=run,
    )
    text = repo.new_row(job, 1)
    decoded = {
        **text,
        "phase": Phase.QUEUED,
        "spec": resolved.spec,
        "final_metrics": {},
        "artifacts": [],
        "run": run,
    }
    assert repo.JobRow.of(text) == repo.JobRow.of(decoded)
    assert repo.JobRow.of(text).run == run
