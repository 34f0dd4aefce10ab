"""Topology checks and stage references, before anything runs."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from runplane.pipelines import dag
from runplane.pipelines.body import MAX_STAGES, PipelineBody
from runplane.pipelines.refs import referenced_stages, resolve


def body(*stages: dict[str, Any]) -> PipelineBody:
    return PipelineBody.model_validate({"stages": [{"stack": "shell", **s} for s in stages]})


def codes(topology: dag.Topology) -> list[tuple[str, str]]:
    return [(p.key, p.code) for p in topology.problems]


def test_a_diamond_orders_each_stage_after_its_needs() -> None:
    b = body(
        {"name": "report", "needs": ["eval1", "eval2"]},
        {"name": "eval1", "needs": ["train"]},
        {"name": "train"},
        {"name": "eval2", "needs": ["train"]},
    )
    topology = dag.check(b.stages)
    assert topology.ok
    names = [b.stages[i].name for i in topology.order]
    assert names == ["train", "eval1", "eval2", "report"]


@pytest.mark.parametrize(
    ("stages", "want"),
    [
        ([{"name": ""}], [("stages[0].name", "empty_name")]),
        ([{"name": "  "}], [("stages[0].name", "empty_name")]),
        ([{"name": "a"}, {"name": "a"}], [("stages[1].name", "duplicate_name")]),
        ([{"name": "a", "needs": ["ghost"]}], [("stages[0].needs", "unknown_dependency")]),
        ([{"name": "a", "needs": ["a"]}], [("stages[0].needs", "cycle")]),
        (
            [{"name": "a"}, {"name": "b", "needs": ["a", "a"]}],
            [("stages[1].needs", "duplicate_dependency")],
        ),
        (
            [{"name": "a"}, {"name": "b", "command": ["echo", "{{stages.a.job_id}}"]}],
            [("stages[1]", "unknown_reference")],
        ),
        (
            [{"name": "b", "env": {"X": "{{ stages.zz.job_id }}"}}],
            [("stages[0]", "unknown_reference")],
        ),
    ],
)
def test_topology_problems_name_the_stage(
    stages: list[dict[str, Any]], want: list[tuple[str, str]]
) -> None:
    assert codes(dag.check(body(*stages).stages)) == want


def test_a_cycle_is_named_with_its_stages() -> None:
    b = body(
        {"name": "start"},
        {"name": "x", "needs": ["start", "z"]},
        {"name": "y", "needs": ["x"]},
        {"name": "z", "needs": ["y"]},
        {"name": "free", "needs": ["start"]},
    )
    topology = dag.check(b.stages)
    assert [p.code for p in topology.problems] == ["cycle"]
    message = topology.problems[0].message
    assert message == "the stages' needs form a cycle: x -> z -> y -> x"
    assert "start" not in message and "free" not in message


def test_a_reference_to_a_needed_stage_is_fine() -> None:
    b = body(
        {"name": "train"},
        {
            "name": "eval",
            "needs": ["train"],
            "command": ["python", "-c", "print('{{stages.train.job_id}}')"],
            "env": {"MODEL_JOB": "{{stages.train.job_id}}"},
            "inputs": [
                {
                    "type": "file",
                    "path": "model.pt",
                    "ref": "/v1/artifacts/{{stages.train.job_id}}/model.pt",
                }
            ],
        },
    )
    assert dag.check(b.stages).ok
    assert referenced_stages(b.stages[1]) == {"train"}


def test_resolve_replaces_references_and_makes_artifact_refs_absolute() -> None:
    b = body(
        {
            "name": "eval",
            "command": ["run", "{{stages.train.job_id}}"],
            "env": {"A": "x-{{stages.train.job_id}}-y"},
            "inputs": [
                {"type": "file", "path": "m.pt", "ref": "/v1/artifacts/{{stages.train.job_id}}/m"},
                {"type": "inline", "path": "n.txt", "ref": "/v1/artifacts/kept"},
            ],
        }
    )
    payload = b.stages[0].model_dump(mode="json", exclude_unset=True)
    out = resolve(payload, {"train": "job_abc"}.__getitem__, "http://10.0.0.5:8080/")
    assert out["command"] == ["run", "job_abc"]
    assert out["env"] == {"A": "x-job_abc-y"}
    assert out["inputs"][0]["ref"] == "http://10.0.0.5:8080/v1/artifacts/job_abc/m"
    assert out["inputs"][1]["ref"] == "/v1/artifacts/kept"  # inline text is not a ref
    assert payload["command"] == ["run", "{{stages.train.job_id}}"]  # the input is untouched


def test_body_limits() -> None:
    with pytest.raises(ValidationError):
        PipelineBody.model_validate({"stages": []})
    with pytest.raises(ValidationError):
        PipelineBody.model_validate({"stages": [{"stack": "shell", "name": "a", "bogus": 1}]})
    many = [{"stack": "shell", "name": f"s{i}"} for i in range(MAX_STAGES + 1)]
    with pytest.raises(ValidationError):
        PipelineBody.model_validate({"stages": many})


def test_a_wide_pipeline_orders_the_root_first_and_the_join_last() -> None:
    # 1,000 stages: a root, 998 between, a join (the benchmark's shape)
    stages = [{"name": "root"}]
    stages += [{"name": f"m{i}", "needs": ["root"]} for i in range(998)]
    stages += [{"name": "join", "needs": [f"m{i}" for i in range(998)]}]
    topology = dag.check(body(*stages).stages)
    assert topology.ok and len(topology.order) == 1000
    assert topology.order[0] == 0 and topology.order[-1] == 999
