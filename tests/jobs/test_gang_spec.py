"""A gang's ``nodes`` (docs/jobs.md "Multi-node jobs"): stored only when more than 1, so a
plain job's spec, spec_hash and default seed stay as they were; a gang's are its own; a
RunSpec and a stage carry it; its demand and fair share count every rank."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runplane.jobs.demand import demand_of
from runplane.jobs.spec import SubmitJobBody, body_hash, resolve
from runplane.placement.fairshare import demand_vector
from runplane.runs.spec import RunSpecBody
from runplane.stacks import load_catalog

from .jobspec_fixtures import STORED

CATALOG = load_catalog()


def test_nodes_1_changes_nothing() -> None:
    plain = SubmitJobBody(stack="shell")
    one = SubmitJobBody.model_validate({"stack": "shell", "nodes": 1})
    assert body_hash(one) == body_hash(plain)
    resolved = resolve(one, CATALOG)
    assert resolved.spec.stored_json() == STORED["minimal"][0]
    assert resolved.spec_hash == STORED["minimal"][1]
    assert resolved.spec.nodes is None
    assert demand_of("job_1", 100, resolved.spec).nodes == 1


def test_a_gang_is_stored_hashed_and_sized_per_rank() -> None:
    body = SubmitJobBody.model_validate(
        {"stack": "shell", "nodes": 4, "limits": {"cpu_cores": 2, "ram_gb": 8}}
    )
    resolved = resolve(body, CATALOG)
    plain = resolve(SubmitJobBody(stack="shell", limits=body.limits), CATALOG)
    assert resolved.spec.stored()["nodes"] == 4
    assert resolved.spec_hash != plain.spec_hash
    assert body_hash(body) != body_hash(SubmitJobBody(stack="shell", limits=body.limits))
    demand = demand_of("job_1", 100, resolved.spec)
    assert demand.nodes == 4 and demand.cpu == 2 and demand.ram == 8  # each rank's
    assert demand_vector(demand) == (8.0, 32.0, 0.0)  # what fair share counts


def test_nodes_is_1_to_64_and_a_runspec_carries_it() -> None:
    for bad in (0, 65):
        with pytest.raises(ValidationError):
            SubmitJobBody.model_validate({"stack": "shell", "nodes": bad})
    stage = RunSpecBody.model_validate({"stack": "shell", "nodes": 2})
    assert stage.nodes == 2
