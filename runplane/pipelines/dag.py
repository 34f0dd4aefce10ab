"""The topology checks of a pipeline, all before anything is enqueued: every stage has a
name of its own, needs only stages that exist (and not itself), the needs form no cycle,
and a ``{{stages.<name>.job_id}}`` reference names a stage the referring stage needs.

``check`` returns the problems (RunProblem: key, code, message), each naming the stages
involved; an empty list means the stages can run in ``order`` (a topological order that
keeps the submitted order among independent stages).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

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


def _key(i: int, field: str = "") -> str:
    return f"stages[{i}]" + (f".{field}" if field else "")


def check(stages: Sequence[PipelineStageBody]) -> Topology:
    problems: list[RunProblem] = []
    index: dict[str, int] = {}
    for i, stage in enumerate(stages):
        name = stage.name
        if not name.strip():
            problems.append(RunProblem(_key(i, "name"), "empty_name", f"stage {i} has no name"))
        elif name in index:
            problems.append(
                RunProblem(
                    _key(i, "name"),
                    "duplicate_name",
                    f"stage name {name!r} is used by stages {index[name]} and {i}",
                )
            )
        else:
            index[name] = i
    for i, stage in enumerate(stages):
        seen: set[str] = set()
        for need in stage.needs:
            if need == stage.name:
                problems.append(
                    RunProblem(_key(i, "needs"), "cycle", f"stage {need!r} needs itself")
                )
            elif need not in index:
                problems.append(
                    RunProblem(
                        _key(i, "needs"),
                        "unknown_dependency",
                        f"stage {stage.name!r} needs {need!r}, which is not a stage"
                        " of this pipeline",
                    )
                )
            elif need in seen:
                problems.append(
                    RunProblem(
                        _key(i, "needs"),
                        "duplicate_dependency",
                        f"stage {stage.name!r} lists {need!r} twice in needs",
                    )
                )
            seen.add(need)
        for ref in sorted(referenced_stages(stage)):
            if ref not in seen or ref == stage.name:
                problems.append(
                    RunProblem(
                        _key(i),
                        "unknown_reference",
                        f"stage {stage.name!r} refers to {{{{stages.{ref}.job_id}}}}, but"
                        f" {ref!r} is not in its needs (a stage can only use the job of a"
                        " stage it needs)",
                    )
                )
    if problems:
        return Topology(problems, [])
    order, cycle = _order(stages, index)
    if cycle:
        names = " -> ".join([*cycle, cycle[0]])
        first = index[cycle[0]]
        problems.append(
            RunProblem(_key(first, "needs"), "cycle", f"the stages' needs form a cycle: {names}")
        )
        return Topology(problems, [])
    return Topology([], order)


def _order(
    stages: Sequence[PipelineStageBody], index: dict[str, int]
) -> tuple[list[int], list[str]]:
    """Kahn's algorithm, lowest index first among the ready; on a cycle, the stages of one
    cycle in order."""
    waiting = [len(set(s.needs)) for s in stages]
    dependents: list[list[int]] = [[] for _ in stages]
    for i, stage in enumerate(stages):
        for need in set(stage.needs):
            dependents[index[need]].append(i)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for d in dependents[i]:
            waiting[d] -= 1
            if waiting[d] == 0:
                heapq.heappush(ready, d)
    if len(order) == len(stages):
        return order, []
    return order, _a_cycle(stages, index, set(order))


def _a_cycle(
    stages: Sequence[PipelineStageBody], index: dict[str, int], done: set[int]
) -> list[str]:
    """Walk needs from a stage left over by the sort until a stage repeats: every stage
    left over needs another left-over stage, so the walk closes a cycle."""
    start = min(i for i in range(len(stages)) if i not in done)
    path: list[int] = []
    position: dict[int, int] = {}
    i = start
    while i not in position:
        position[i] = len(path)
        path.append(i)
        i = min(index[n] for n in stages[i].needs if index[n] not in done)
    return [stages[j].name for j in path[position[i] :]]
