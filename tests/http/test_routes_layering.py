"""Routes reach the store only through services (docs/architecture.md, "Tables and their
owners"). Imports are import-linter's business (the ``routes`` contract in pyproject.toml:
no route imports ``runplane.persistence`` or a ``repo`` module); what it cannot see is a
route reading the store off an object (``services().store``), checked here: with no store
in hand, a route cannot run a table owner's SQL itself."""

from __future__ import annotations

import ast
from pathlib import Path

ROUTES = Path(__file__).resolve().parents[2] / "runplane" / "http" / "routes"


def offences(source: str) -> list[str]:
    return [
        f"line {node.lineno}: reads .store"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute) and node.attr == "store"
    ]


def test_routes_read_no_store_off_an_object() -> None:
    bad = {
        path.name: found
        for path in sorted(ROUTES.glob("*.py"))
        if (found := offences(path.read_text(encoding="utf-8")))
    }
    assert bad == {}, f"routes that reach the store directly: {bad}"


def test_the_check_catches_a_direct_read() -> None:
    source = "async def f(svc):\n    return await svc.store.fetch_one('SELECT 1')\n"
    assert offences(source) == ["line 2: reads .store"]
