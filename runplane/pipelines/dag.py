"""The topology checks of a pipeline, all before anything is enqueued: the stages form a
valid DAG (``runplane/dag.py``: names present and unique, needs known, no cycle, the cycle
named), and a ``{{stages.<name>.job_id}}`` reference names a stage the referring stage
needs. ``check`` returns the problems (RunProblem: key, code, message), each naming the
stages involved; none means the stages can run in ``order``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runplane import dag
from runplane.runs import RunProblem

from .body import PipelineStageBody
from .refs import referenced_stages


@dataclass(frozen=True, slots=True)
class Topology:
    problems: list[RunProblem]
    #: stage indexes in an order where each stage comes after everything it needs
    order: list[int]

    @property
    def ok(self) -> bool:
        return not self.problems


def check(stages: Sequence[PipelineStageBody]) -> Topology:
    graph = dag.check(stages, prefix="stages", what="stage")
    problems = [RunProblem(p.key, p.code, p.message) for p in graph.problems]
    for i, stage in enumerate(stages):
        needs = set(stage.needs)
        for ref in sorted(referenced_stages(stage)):
            if ref not in needs or ref == stage.name:
                problems.append(
                    RunProblem(
                        f"stages[{i}]",
                        "unknown_reference",
                        f"stage {stage.name!r} refers to {{{{stages.{ref}.job_id}}}}, but"
                        f" {ref!r} is not in its needs (a stage can only use the job of a"
                        " stage it needs)",
                    )
                )
    if problems:
        return Topology(problems, [])
    return Topology([], graph.order)
