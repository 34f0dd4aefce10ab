"""Routes reach the store only through services (docs/architecture.md, "Tables and their
owners"): no module of runplane/http/routes/ imports the store (``runplane.persistence``) or
a ``repo`` module, nor reads a ``.store`` attribute (``services().store``): with no store in
hand, a route cannot run a table owner's SQL itself."""

from __future__ import annotations

import ast
from pathlib import Path

ROUTES = Path(__file__).resolve().parents[2] / "runplane" / "http" / "routes"

#: the store itself; a table's owning modules are the ``repo`` modules (and a few others,
#: whose models and constants routes may use: without a store in hand, they cannot call
#: their SQL)
STORE = "runplane.persistence"


def _imported(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _forbidden(name: str) -> bool:
    parts = name.split(".")
    return "repo" in parts or name == STORE or name.startswith(STORE + ".")


def offences(source: str) -> list[str]:
    tree = ast.parse(source)
    found = [f"imports {name}" for name in sorted(_imported(tree)) if _forbidden(name)]
    found += [
        f"line {node.lineno}: reads .store"
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "store"
    ]
    return found


def test_routes_reach_the_store_only_through_services() -> None:
    bad = {
        path.name: found
        for path in sorted(ROUTES.glob("*.py"))
        if (found := offences(path.read_text(encoding="utf-8")))
    }
    assert bad == {}, f"routes that reach the store or a table's owner directly: {bad}"


def test_the_check_catches_a_direct_read() -> None:
    source = (
        "from runplane.jobs import repo\n"
        "from runplane.persistence import now_ms\n"
        "async def f(svc):\n"
        "    return await repo.get_row(svc.store, 'job_1', None)\n"
    )
    assert offences(source) == [
        "imports runplane.jobs.repo",
        "imports runplane.persistence",
        "imports runplane.persistence.now_ms",
        "line 4: reads .store",
    ]
