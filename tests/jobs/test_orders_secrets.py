"""The run order puts org secrets in where the spec references them, in the job's env and
in each pod service's env, and lists them (with the spec's opened sealed values) for the
agent to mask (runplane/jobs/orders.py, runplane/vault.py)."""

from __future__ import annotations

from runplane.jobs import repo
from runplane.jobs.jobspec import JobSpec, PodService
from runplane.jobs.orders import run_order
from runplane.jobs.rows import JobRow
from runplane.jobs.spec import SubmitJobBody, resolve
from runplane.stacks import load_catalog


def row_of(spec: JobSpec) -> JobRow:
    job = repo.NewJob(
        id="job_x",
        org_id="org_a",
        project="",
        submitted_by="u",
        spec=spec,
        spec_hash="h",
        priority=0,
    )
    return JobRow.of(repo.new_row(job, 1))


def test_pod_services_get_their_secret_references_and_everything_is_masked() -> None:
    body = SubmitJobBody.model_validate(
        {"stack": "shell", "command": ["true"], "env": {"A": "${secrets.ONE}"}}
    )
    spec = resolve(body, load_catalog()).spec
    pod = [
        PodService(name="web", command=["srv"], env={"DB_URL": "pg://u:${secrets.TWO}@db"}),
        PodService(name="db", command=["db"], env={"PORT": "5432"}),
    ]
    spec = spec.model_copy(update={"pod": pod})
    assert spec.secret_references() == {
        "env.A": ["ONE"],
        "pod.web.env.DB_URL": ["TWO"],
    }
    order = run_order(
        row_of(spec), 1, {}, {"ONE": "first-value", "TWO": "second-value"}, ["opened-plain-value"]
    )
    assert order.spec.env["A"] == "first-value"
    assert order.spec.pod is not None
    assert order.spec.pod[0].env == {"DB_URL": "pg://u:second-value@db"}
    assert order.spec.pod[1].env == {"PORT": "5432"}
    assert order.spec.mask == ["opened-plain-value", "second-value", "first-value"]
