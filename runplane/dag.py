"""Dependency graphs of named things that need each other (pipeline stages, pod
services): every name present and unique, every need known (and not the thing itself,
and not twice), and no cycle. ``check`` returns the problems, each keyed by where the
body says it (``<prefix>[i].name``, ``<prefix>[i].needs``) and naming what is involved, or
an order in which each thing comes after everything it needs (the given order kept among
independent ones: Kahn's algorithm, lowest index first)."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from runplane.problems import FieldProblem


class Node(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def needs(self) -> Sequence[str]: ...


@dataclass(frozen=True, slots=True)
class Graph:
    problems: list[FieldProblem]
    #: indexes in an order where each comes after everything it needs ([] on problems)
    order: list[int]

    @property
    def ok(self) -> bool:
        return not self.problems


def check(nodes: Sequence[Node], *, prefix: str, what: str) -> Graph:
    """``prefix`` is where the list sits in the body (``stages``, ``pod.services``);
    ``what`` names one item in messages (``stage``, ``service``)."""
    problems: list[FieldProblem] = []
    index: dict[str, int] = {}

    def key(i: int, field: str) -> str:
        return f"{prefix}[{i}].{field}"

    for i, node in enumerate(nodes):
        name = node.name
        if not name.strip():
            problems.append(FieldProblem(key(i, "name"), "empty_name", f"{what} {i} has no name"))
        elif name in index:
            problems.append(
                FieldProblem(
                    key(i, "name"),
                    "duplicate_name",
                    f"{what} name {name!r} is used by {what}s {index[name]} and {i}",
                )
            )
        else:
            index[name] = i
    for i, node in enumerate(nodes):
        seen: set[str] = set()
        for need in node.needs:
            if need == node.name:
                problems.append(
                    FieldProblem(key(i, "needs"), "cycle", f"{what} {need!r} needs itself")
                )
            elif need not in index:
                problems.append(
                    FieldProblem(
                        key(i, "needs"),
                        "unknown_dependency",
                        f"{what} {node.name!r} needs {need!r}, which is not a {what} here",
                    )
                )
            elif need in seen:
                problems.append(
                    FieldProblem(
                        key(i, "needs"),
                        "duplicate_dependency",
                        f"{what} {node.name!r} lists {need!r} twice in needs",
                    )
                )
            seen.add(need)
    if problems:
        return Graph(problems, [])
    order, cycle = _order(nodes, index)
    if cycle:
        names = " -> ".join([*cycle, cycle[0]])
        problems.append(
            FieldProblem(
                key(index[cycle[0]], "needs"), "cycle", f"the {what}s' needs form a cycle: {names}"
            )
        )
        return Graph(problems, [])
    return Graph([], order)


def _order(nodes: Sequence[Node], index: dict[str, int]) -> tuple[list[int], list[str]]:
    waiting = [len(set(n.needs)) for n in nodes]
    dependents: list[list[int]] = [[] for _ in nodes]
    for i, node in enumerate(nodes):
        for need in set(node.needs):
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
    if len(order) == len(nodes):
        return order, []
    return order, _a_cycle(nodes, index, set(order))


def _a_cycle(nodes: Sequence[Node], index: dict[str, int], done: set[int]) -> list[str]:
    """Walk needs from a node left over by the sort until one repeats: every left-over
    node needs another left-over node, so the walk closes a cycle."""
    start = min(i for i in range(len(nodes)) if i not in done)
    path: list[int] = []
    position: dict[int, int] = {}
    i = start
    while i not in position:
        position[i] = len(path)
        path.append(i)
        i = min(index[n] for n in nodes[i].needs if index[n] not in done)
    return [nodes[j].name for j in path[position[i] :]]
