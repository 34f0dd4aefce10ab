"""The import graph of runplane/, declared once in docs/architecture.md ("## Import graph"),
is what the code imports: every import of every module is an edge of that graph, every unit
of runplane/ has a line in it, and the graph itself is acyclic and keeps the domain away
from http and cli."""

from __future__ import annotations

import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "runplane"
ARCHITECTURE = REPO / "docs" / "architecture.md"
DOC = "docs/architecture.md"
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}
#: the unit naming the package's own __init__.py (``from runplane import __version__``)
ROOT_UNIT = "__init__"
#: the only units that may reach http (and cli): the entry points
ENTRY_POINTS = frozenset({"http", "cli", "__main__"})
#: third-party roots that are the web server and framework: http's and cli's business only
WEB = frozenset({"quart", "quart_trio", "werkzeug", "hypercorn", "h11"})
#: ... but for these: ``outbound`` is the server's HTTP client (h11 as a client)
WEB_CLIENTS = {"outbound": frozenset({"h11"})}
#: the domain units: never an edge to http or cli
DOMAIN = (
    "runtime",
    "persistence",
    "placement",
    "stacks",
    "policy",
    "jobs",
    "runs",
    "nodes",
    "auth",
    "actors",
    "services",
)


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
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        match = re.fullmatch(r"\s*([\w.]+):\s*(.*?)\s*\|\s*(.*?)\s*", line)
        assert match, f"{DOC}: import graph line {line!r} is not 'unit: units | third-party'"
        unit, units, third_party = match.groups()
        assert unit not in graph, f"{DOC}: unit {unit} has two lines in the import graph"
        graph[unit] = Allowed(_names(units), _names(third_party))
    return graph


def _names(field: str) -> frozenset[str]:
    return frozenset() if field == "-" else frozenset(n.strip() for n in field.split(","))


def _exists(package: Path, dotted: str) -> bool:
    """Whether ``dotted`` (relative to the package) is a module or package in the tree."""
    path = package.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or path.is_dir()


def units_on_disk(package: Path) -> set[str]:
    """The top-level units: each module directly in the package and each directory holding
    Python code (a namespace package without __init__.py counts too)."""
    units = {ROOT_UNIT}
    for child in package.iterdir():
        if child.suffix == ".py" and child.name != "__init__.py":
            units.add(child.stem)
        elif child.is_dir() and child.name != "__pycache__" and any(child.rglob("*.py")):
            units.add(child.name)
    return units


def coverage_problems(package: Path, graph: Graph) -> list[str]:
    problems = [
        f"{package.name}/{unit} is not in the import graph in {DOC}; add a line for it"
        for unit in sorted(units_on_disk(package) - graph.keys())
    ]
    problems += [
        f"the import graph in {DOC} has a line for {unit}, which is not in {package.name}/"
        for unit in graph
        if unit != ROOT_UNIT and not _exists(package, unit)
    ]
    problems += [
        f"the import graph in {DOC} lets {unit} import {dep}, which has no line of its own"
        for unit, allowed in graph.items()
        for dep in sorted(allowed.units - graph.keys())
    ]
    return problems


def find_cycle(graph: Graph) -> list[str] | None:
    """One cycle of declared edges (``[a, b, a]``), or None."""
    done: set[str] = set()

    def visit(unit: str, path: list[str]) -> list[str] | None:
        if unit in path:
            return [*path[path.index(unit) :], unit]
        if unit in done or unit not in graph:
            return None
        for dep in sorted(graph[unit].units):
            if cycle := visit(dep, [*path, unit]):
                return cycle
        done.add(unit)
        return None

    for unit in graph:
        if cycle := visit(unit, []):
            return cycle
    return None


def reachable(graph: Graph, unit: str) -> set[str]:
    seen: set[str] = set()
    todo = list(graph[unit].units)
    while todo:
        dep = todo.pop()
        if dep not in seen:
            seen.add(dep)
            todo.extend(graph[dep].units if dep in graph else ())
    return seen


def unit_of(graph: Graph, dotted: str) -> str | None:
    """The unit a module belongs to: the longest graph name that is it or a package of it."""
    if dotted == "":
        return ROOT_UNIT if ROOT_UNIT in graph else None
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in graph:
            return ".".join(parts[:n])
    return None


@dataclass(frozen=True)
class Import:
    line: int
    #: dotted name as imported: ``runplane.jobs.rows``, ``quart``
    name: str
    nested: bool


def imports_of(path: Path, package: Path) -> list[Import]:
    """Every import in the file (module level, in functions, under TYPE_CHECKING), with
    relative imports and ``from <pkg> import <module>`` resolved to the module's name."""
    rel = path.relative_to(package).with_suffix("").parts
    here = list(rel[:-1])  # the package a relative import starts from (also for __init__)
    tree = ast.parse(path.read_text(), filename=str(path))
    in_function = {
        id(node)
        for fn in ast.walk(tree)
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(fn)
    }
    found: list[Import] = []
    for node in ast.walk(tree):
        nested = id(node) in in_function
        if isinstance(node, ast.Import):
            found += [Import(node.lineno, alias.name, nested) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[: len(here) - (node.level - 1)]
                module = ".".join([package.name, *base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                name = module
                if module.split(".")[0] == package.name:
                    inner = ".".join([*module.split(".")[1:], alias.name])
                    if alias.name != "*" and _exists(package, inner):
                        name = f"{module}.{alias.name}"
                found.append(Import(node.lineno, name, nested))
    return sorted(found, key=lambda i: (i.line, i.name))


def import_problems(package: Path, graph: Graph) -> list[str]:
    """One message per import that is not an edge of ``graph``."""
    problems: list[str] = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package).with_suffix("")
        dotted = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        unit = unit_of(graph, dotted)
        shown = path.relative_to(package.parent).as_posix()
        if unit is None:
            problems.append(f"{shown} is in no unit of the import graph in {DOC}")
            continue
        allowed = graph[unit]
        for imp in imports_of(path, package):
            root, _, inner = imp.name.partition(".")
            where = f"{shown}:{imp.line} imports {imp.name}" + (
                " (inside a function)" if imp.nested else ""
            )
            if root == package.name:
                target = unit_of(graph, inner)
                if target == unit:
                    continue
                if target is None or target not in allowed.units:
                    may = ", ".join(sorted(allowed.units)) or "nothing of " + package.name
                    problems.append(f"{where} ({unit} may import: {may}){_HINT}")
            elif root not in STDLIB and root not in allowed.third_party:
                may = ", ".join(sorted(allowed.third_party)) or "none"
                problems.append(f"{where} (third-party; {unit} may import: {may}){_HINT}")
    return problems


_HINT = f"; change the code or, if the new edge is intended, add it to the graph in {DOC}"


def _graph() -> Graph:
    return parse_graph(ARCHITECTURE.read_text())


def _report(problems: list[str]) -> str:
    return f"{len(problems)} import graph violation(s):\n" + "\n".join(problems)


def test_every_unit_of_runplane_is_in_the_graph() -> None:
    problems = coverage_problems(PACKAGE, _graph())
    assert not problems, _report(problems)


def test_graph_is_acyclic_and_declared_bottom_up() -> None:
    graph = _graph()
    cycle = find_cycle(graph)
    assert cycle is None, f"the import graph in {DOC} has a cycle: {' -> '.join(cycle)}"
    order = list(graph)
    late = [
        f"{unit} names {dep}, declared below it"
        for unit, allowed in graph.items()
        for dep in sorted(allowed.units)
        if dep in graph and order.index(dep) > order.index(unit)
    ]
    assert not late, f"declare the import graph in {DOC} bottom-up: {late}"


def test_graph_keeps_the_domain_away_from_http_and_cli() -> None:
    graph = _graph()
    for unit in DOMAIN:
        assert not graph[unit].units & {"http", "cli"}, f"{DOC}: {unit} may import http or cli"
    for unit in graph.keys() - ENTRY_POINTS:
        reached = reachable(graph, unit) & {"http", "cli"}
        assert not reached, f"{DOC}: {unit} reaches {sorted(reached)} through the import graph"
        web = graph[unit].third_party & WEB - WEB_CLIENTS.get(unit, frozenset())
        assert not web, f"{DOC}: {unit} may import {sorted(web)}; only http and cli may"
    importers = sorted(unit for unit, allowed in graph.items() if "system" in allowed.units)
    assert set(importers) <= {"cli", "http"}, (
        f"{DOC}: only http and cli may import the composition root system, not {importers}"
    )
    assert "cli" not in reachable(graph, "http"), f"{DOC}: http reaches cli"


def test_runtime_imports_only_stdlib_and_trio() -> None:
    assert _graph()["runtime"] == Allowed(frozenset(), frozenset({"trio"}))
    assert len(list((PACKAGE / "runtime").glob("*.py"))) >= 8
    problems = [p for p in import_problems(PACKAGE, _graph()) if "runplane/runtime/" in p]
    assert not problems, _report(problems)


def test_imports_follow_the_graph() -> None:
    problems = import_problems(PACKAGE, _graph())
    assert not problems, _report(problems)


# The checker itself, on a synthetic package.

FAKE_GRAPH = """\
## Import graph

```text
__init__: - | -
base:     - | -
jobs:     base | pydantic
http:     jobs, base | quart
```
"""


def _fake_package(tmp_path: Path, files: dict[str, str]) -> Path:
    package = tmp_path / "fakepkg"
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_checker_reports_a_forbidden_import(tmp_path: Path) -> None:
    package = _fake_package(
        tmp_path,
        {
            "base/__init__.py": "from . import clock\n",
            "base/clock.py": "import time\n",
            "http/__init__.py": "",
            "http/app.py": "import quart\nfrom fakepkg.jobs import repo\n",
            "jobs/__init__.py": "",
            "jobs/repo.py": (
                "import json\n"
                "import pydantic\n"
                "from fakepkg.base import clock\n"
                "from fakepkg.http import app\n"
                "import quart\n"
                "def later():\n"
                "    from ..http.app import quart\n"
            ),
        },
    )
    graph = parse_graph(FAKE_GRAPH)
    assert coverage_problems(package, graph) == []
    problems = import_problems(package, graph)
    assert problems == [
        "fakepkg/jobs/repo.py:4 imports fakepkg.http.app (jobs may import: base)" + _HINT,
        "fakepkg/jobs/repo.py:5 imports quart (third-party; jobs may import: pydantic)" + _HINT,
        "fakepkg/jobs/repo.py:7 imports fakepkg.http.app (inside a function)"
        " (jobs may import: base)" + _HINT,
    ]


def test_checker_reports_missing_units_and_cycles(tmp_path: Path) -> None:
    package = _fake_package(
        tmp_path, {"base/__init__.py": "", "jobs/x.py": "", "extra.py": "", "http/x.py": ""}
    )
    graph = parse_graph(FAKE_GRAPH.replace("base:     - | -", "base:     http | -"))
    assert coverage_problems(package, graph) == [
        f"fakepkg/extra is not in the import graph in {DOC}; add a line for it"
    ]
    assert find_cycle(graph) == ["base", "http", "base"]
    assert find_cycle(parse_graph(FAKE_GRAPH)) is None
