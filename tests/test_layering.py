"""The import graph of runplane/ is checked by import-linter (`lint-imports`, run by
scripts/test) against the contracts in pyproject.toml ([tool.importlinter]). The graph in
docs/architecture.md ("## Import graph") says the same, per edge: these tests keep the two in
agreement (the doc's lines are the contract's layers; its edges break no contract) and the
doc's edges true to the code, read with grimp, the import graph import-linter itself builds."""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grimp
import pytest

REPO = Path(__file__).resolve().parent.parent
DOC = "docs/architecture.md"
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
#: the unit naming the package's own __init__.py (``from runplane import __version__``)
ROOT_UNIT = "__init__"
#: a unit of the doc inside another one: the layers contract ignores imports of it and the
#: "protocol" contract keeps it a leaf
NESTED = "agent.protocol"


@dataclass(frozen=True)
class Allowed:
    units: frozenset[str]
    third_party: frozenset[str]


#: unit -> what it may import, in the order the doc declares it (bottom-up)
Graph = dict[str, Allowed]


def parse_graph(markdown: str) -> Graph:
    """The ```text block of the "## Import graph" section: ``unit: a, b | x, y`` per line."""
    section = re.search(r"^## Import graph\n(.*?)(?=^## |\Z)", markdown, re.M | re.S)
    assert section, f"{DOC} has no '## Import graph' section"
    block = re.search(r"^```text\n(.*?)^```", section.group(1), re.M | re.S)
    assert block, f"the '## Import graph' section of {DOC} has no ```text block"
    graph: Graph = {}
    for line in block.group(1).splitlines():
        if not line.strip():
            continue
        match = re.fullmatch(r"\s*([\w.]+):\s*(.*?)\s*\|\s*(.*?)\s*", line)
        assert match, f"{DOC}: import graph line {line!r} is not 'unit: units | third-party'"
        unit, units, third_party = match.groups()
        assert unit not in graph, f"{DOC}: unit {unit} has two lines in the import graph"
        graph[unit] = Allowed(_names(units), _names(third_party))
    return graph


def _names(field: str) -> frozenset[str]:
    return frozenset() if field == "-" else frozenset(n.strip() for n in field.split(","))


@pytest.fixture(scope="module")
def graph() -> Graph:
    return parse_graph((REPO / DOC).read_text())


@pytest.fixture(scope="module")
def contracts() -> dict[str, dict[str, Any]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    return {contract["id"]: contract for contract in config["contracts"]}


def test_doc_lines_are_the_layers_contract(
    graph: Graph, contracts: dict[str, dict[str, Any]]
) -> None:
    """Bottom-up in the doc, top-down in the contract (which is exhaustive: every unit of
    runplane/ is a layer, so every unit has a line in the doc too)."""
    layers = contracts["layers"]["layers"]
    doc = [unit for unit in graph if unit not in {ROOT_UNIT, NESTED}]
    assert doc == layers[::-1], f"{DOC}'s import graph lines and pyproject.toml's layers differ"


def _forbidden(contract: dict[str, Any], unit: str) -> set[str]:
    """What the contract forbids ``unit`` (a unit of the doc or a third-party root)."""
    sources = {m.removeprefix("runplane.") for m in contract["source_modules"]}
    if unit not in sources:
        return set()
    return {m.removeprefix("runplane.") for m in contract["forbidden_modules"]} - {"*"}


def test_doc_edges_break_no_contract(graph: Graph, contracts: dict[str, dict[str, Any]]) -> None:
    order = list(graph)
    problems = [
        f"{unit} names {dep}, declared below it"
        for unit, allowed in graph.items()
        for dep in allowed.units
        if dep not in graph or order.index(dep) > order.index(unit)
    ]
    for contract in contracts.values():
        if contract["type"] == "forbidden":
            problems += [
                f"{unit} names {sorted(bad)}, which contract {contract['id']!r} forbids"
                for unit, allowed in graph.items()
                if (bad := (allowed.units | allowed.third_party) & _forbidden(contract, unit))
            ]
    protected = contracts["system"]
    importers = {m.removeprefix("runplane.") for m in protected["allowed_importers"]}
    problems += [
        f"{unit} names system, which contract 'system' forbids"
        for unit, allowed in graph.items()
        if "system" in allowed.units and unit not in importers
    ]
    assert not problems, f"{DOC}'s import graph breaks pyproject.toml's contracts: {problems}"
    # the wildcards: runtime, agent.protocol and client import nothing of runplane
    assert graph["runtime"] == Allowed(frozenset(), frozenset({"trio"}))
    assert not graph[NESTED].units and not graph["client"].units


def _unit_of(graph: Graph, module: str) -> str:
    inner = module.removeprefix("runplane").removeprefix(".")
    parts = inner.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in graph:
            return ".".join(parts[:n])
    return ROOT_UNIT


def _code_edges(graph: Graph) -> Iterator[tuple[str, str, str]]:
    """(unit, imported unit or third-party root, importing module) for every import."""
    code = grimp.build_graph("runplane", include_external_packages=True, cache_dir=None)
    for module in sorted({"runplane"} | code.find_descendants("runplane")):
        unit = _unit_of(graph, module)
        for imported in code.find_modules_directly_imported_by(module):
            if imported.split(".")[0] == "runplane":
                yield unit, _unit_of(graph, imported), module
            elif imported not in STDLIB:
                yield unit, imported, module


def test_doc_edges_are_true_to_the_code(graph: Graph) -> None:
    """Every import in runplane/ is an edge of the doc's graph (the standard library is free),
    so a new edge means a new line or name there, in the same change."""
    problems = sorted(
        {
            f"{module} imports {dep} ({unit} may import: "
            f"{', '.join(sorted(graph[unit].units | graph[unit].third_party)) or 'nothing'})"
            for unit, dep, module in _code_edges(graph)
            if dep != unit and dep not in graph[unit].units | graph[unit].third_party
        }
    )
    assert not problems, (
        f"{len(problems)} import(s) not in the graph in {DOC}; change the code or, if the edge is"
        " intended, add it there (and keep pyproject.toml's contracts true):\n"
        + "\n".join(problems)
    )
