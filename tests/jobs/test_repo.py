"""The row a submit hands to the job actor is exactly the row the store holds."""

from __future__ import annotations

from runplane.jobs import repo
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
    assert inserted == stored
    replay = await store.transaction(repo.insert_job(store, job))
    assert replay == "job_test1"  # the same key and body: the first job's id
