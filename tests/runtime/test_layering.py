"""runtime/ is generic: it may import only the standard library, trio and itself."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import runplane.runtime

RUNTIME = Path(runplane.runtime.__file__).parent


def imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_runtime_imports_only_stdlib_and_trio() -> None:
    files = sorted(RUNTIME.glob("*.py"))
    assert len(files) >= 8
    for path in files:
        foreign = imported_roots(path) - set(sys.stdlib_module_names) - {"trio", "__future__"}
        assert not foreign, f"{path.name} imports {foreign}"
