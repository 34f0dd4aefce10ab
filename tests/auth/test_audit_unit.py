"""The audit trail's storage: scrubbing, order, org filter, limit, memory no-op."""

from __future__ import annotations

from runplane.auth import audit
from runplane.auth.principal import ADMIN, Principal, anonymous
from runplane.jobs import repo
from runplane.jobs.jobspec import JobSpec
from runplane.persistence import Store

USER = Principal(kind="user", subject="usr_1", org_id="org_a", read_org="org_a", credential="token")


def test_scrub() -> None:
    snapshot = {
        "id": "tok_1",
        "token": "rpt_abcdefghijklmnop",
        "nested": {"secret": "x", "Password": "y", "note": "uses rpj_abcdefghijkl here"},
        "list": ["rps_abcdefghijklmnop", 3],
        "private_key": "----",
        "count": 2,
    }
    assert audit.scrub(snapshot) == {
        "id": "tok_1",
        "token": "[redacted]",
        "nested": {
            "secret": "[redacted]",
            "Password": "[redacted]",
            "note": "uses [redacted] here",
        },
        "list": ["[redacted]", 3],
        "private_key": "[redacted]",
        "count": 2,
    }


def test_actor_of() -> None:
    assert audit.actor_of(ADMIN) == ("service", "admin")
    assert audit.actor_of(USER) == ("user", "usr_1")
    assert audit.actor_of(anonymous(sees_all=True)) == ("user", "anonymous")


async def test_append_and_list(store: Store) -> None:
    ids = []
    for n, org in enumerate(["org_a", "org_b", "org_a"]):
        ids.append(
            await audit.append(
                store,
                action="runs:submit",
                resource_type="job",
                resource_id=f"job_{n}",
                org_id=org,
                actor=USER,
                ip="10.0.0.1",
                after={"stack": "shell", "secret": "hunter2"},
            )
        )
    rows = await audit.list_rows(store)
    if not store.supports_identity:  # memory: nothing recorded, empty list (spec)
        assert ids == [None, None, None] and rows == []
        return
    assert [r["id"] for r in rows] == ids[::-1]  # newest first
    assert rows[0]["after"] == {"stack": "shell", "secret": "[redacted]"}
    assert (rows[0]["actor_type"], rows[0]["actor_id"], rows[0]["ip"]) == (
        "user",
        "usr_1",
        "10.0.0.1",
    )
    assert rows[0]["created_at"].endswith("Z")
    assert [r["resource_id"] for r in await audit.list_rows(store, org_id="org_a")] == [
        "job_2",
        "job_0",
    ]
    assert len(await audit.list_rows(store, limit=1)) == 1


def test_job_snapshot_keeps_no_spec() -> None:
    spec = JobSpec(stack="shell", image="i", mode="run", seed=1, env={"K": "v"})
    new = repo.NewJob(
        id="job_1", org_id="o", project="", submitted_by="u", spec=spec, spec_hash="h", priority=1
    )
    row = repo.JobRow.of(repo.new_row(new, 0))
    snap = audit.job_snapshot(row, cancelled=True)
    assert "spec" not in snap and snap["stack"] == "shell" and snap["cancelled"] is True
    assert snap["phase"] == "queued" and type(snap["phase"]) is str
