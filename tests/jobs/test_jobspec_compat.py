"""The typed JobSpec reads and writes specs as the dict-based code before it did: every
stored shape (tests/jobs/jobspec_fixtures.py, written by that code) loads, re-serializes
byte for byte and keeps its spec_hash; the same bodies resolve to the same bytes today."""

from __future__ import annotations

import json

import pytest

from runplane import runs
from runplane.jobs.arrays import BatchBody, expand
from runplane.jobs.jobspec import JobSpec, opened, sealed, spec_hash
from runplane.jobs.rows import JobRow
from runplane.jobs.spec import SubmitJobBody, body_hash, build, finish, raise_issues, resolve
from runplane.runs.spec import RunSpecBody
from runplane.sealing import Sealer
from runplane.stacks import load_catalog

from .jobspec_fixtures import STORED

SEALER = Sealer(b"k" * 32)
CATALOG = load_catalog()


@pytest.mark.parametrize("shape", sorted(STORED))
def test_a_stored_spec_loads_and_writes_back_the_same_bytes(shape: str) -> None:
    text, _ = STORED[shape]
    spec = JobSpec.model_validate_json(text)
    assert spec.stored_json() == text
    assert JobSpec.load(json.loads(text)).stored_json() == text
    # a row written with today's code reads back the same
    row = JobRow.of(_row(text))
    assert row.spec == spec and row.spec.stored_json() == text


@pytest.mark.parametrize("shape", sorted(STORED))
def test_a_stored_spec_keeps_its_hash(shape: str) -> None:
    text, digest = STORED[shape]
    plain, _ = opened(JobSpec.model_validate_json(text), lambda: SEALER, "org_1")
    assert spec_hash(plain) == digest


def test_sealed_values_open_and_seal_again() -> None:
    stored = JobSpec.model_validate_json(STORED["session"][0])
    assert stored.has_sealed() and stored.pod is not None
    plain, values = opened(stored, lambda: SEALER, "org_1")
    assert values == ["pw123456"] and not plain.has_sealed()
    assert plain.pod is not None and plain.pod[0].env["PGPASSWORD"] == "pw123456"
    again = sealed(plain, lambda: SEALER, "org_1")
    assert again.has_sealed() and opened(again, lambda: SEALER, "org_1")[0] == plain
    assert plain.secret_references() == {"pod.db.env.X": ["S"]}


def test_absent_keys_stay_absent() -> None:
    """What a spec lacks (no retry policy, no pod, nothing sealed, a mount without a git
    connection's rev and commit; an older row: more) it does not write back as null."""
    old = '{"command":["true"],"limits":{"cpu_cores":2},"stack":"shell","workspace":null}'
    spec = JobSpec.model_validate_json(old)
    assert spec.stored_json() == old
    assert spec.retry is None and spec.pod is None and spec.limits.ram_gb is None
    assert JobSpec.model_validate_json("{}").stored_json() == "{}"
    minimal = JobSpec.model_validate_json(STORED["minimal"][0]).stored()
    assert not {"retry", "pod", "env_sealed"} & set(minimal)
    git = JobSpec.model_validate_json(STORED["git"][0])
    assert git.inputs[0].commit is None and "commit" not in git.stored()["inputs"][0]
    assert git.connection_ids() == {"gcn_1", "gcn_2"}


def _plain(body: SubmitJobBody, limits: dict[str, int | None] | None = None) -> tuple[str, str]:
    planned = runs.plan(body, CATALOG)
    raise_issues(planned.issues)
    assert planned.stack is not None
    spec = build(body, planned.stack, planned.config, body_hash(body))
    done = finish(spec, priority=body.priority, project=body.project, limits=limits)
    return done.spec.stored_json(), done.spec_hash


def test_todays_bodies_resolve_to_the_stored_bytes() -> None:
    """The shapes without sealed values, built again by today's submit path."""
    assert resolve(SubmitJobBody(stack="shell"), CATALOG).spec.stored_json() == STORED["minimal"][0]
    assert resolve(SubmitJobBody(stack="shell"), CATALOG).spec_hash == STORED["minimal"][1]
    clamp = {"cpu_cores": 128, "ram_gb": None, "gpu_count": None, "timeout_sec": None}
    body = SubmitJobBody.model_validate(
        {"stack": "shell", "command": ["true"], "limits": {"cpu_cores": 200}}
    )
    assert _plain(body, clamp) == STORED["clamped"]
    stage = RunSpecBody.model_validate(
        {"stack": "sim-cartpole", "layers": {"org": {"episodes": 3}}, "config": {}, "project": "p"}
    )
    assert _plain(stage) == STORED["stage"]
    batch = BatchBody.model_validate(
        {"job": {"stack": "sim-cartpole", "config": {}}, "sweep": {"episodes": [1, 2]}}
    )
    assert _plain(expand(batch)[1].body) == STORED["array_item"]


def _row(spec_text: str) -> dict[str, object]:
    return {
        "id": "job_1",
        "org_id": "org_1",
        "project": "",
        "submitted_by": "u",
        "stack": "shell",
        "image": "",
        "phase": "queued",
        "priority": 100,
        "mode": "run",
        "seed": 1,
        "spec_hash": "",
        "spec": spec_text,
        "node_id": None,
        "attempt": 0,
        "attempts": 0,
        "error": None,
        "wait_reason": None,
        "final_metrics": "{}",
        "artifacts": "[]",
        "event_seq": 1,
        "log_lines": 0,
        "log_dropped": 0,
        "created_at": 0,
        "started_at": None,
        "finished_at": None,
        "updated_at": 0,
        "run": None,
    }
