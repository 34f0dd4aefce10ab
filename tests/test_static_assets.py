"""The web UI's files as the browser gets them (docs/ui.md): the stylesheet's blocks are
balanced (one unclosed ``@media`` block silently turns every later rule into a narrow-
screen rule), and every page module is valid JavaScript that imports only modules that
exist and names only what they export."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

STATIC = Path(__file__).resolve().parent.parent / "runplane" / "static"
MODULES = sorted(STATIC.glob("*.js"))


def test_the_stylesheet_blocks_are_balanced() -> None:
    css = re.sub(r"/\*.*?\*/", "", (STATIC / "app.css").read_text(), flags=re.S)
    depth = 0
    for number, line in enumerate(css.splitlines(), 1):
        depth += line.count("{") - line.count("}")
        assert depth >= 0, f"app.css line {number} closes a block it never opened"
        if depth > 1:
            assert depth == 2 and line.startswith("  "), f"app.css line {number}: nested {depth}"
    assert depth == 0, "app.css ends inside a block (a missing '}')"


def test_each_module_imports_what_another_exports() -> None:
    exports = {
        path.name: set(
            re.findall(
                r"^export (?:async )?(?:function|const|let|class) (\w+)", path.read_text(), re.M
            )
        )
        for path in MODULES
    }
    for path in MODULES:
        for names, source in re.findall(
            r'import \{([^}]*)\} from "\./([\w.]+)";', path.read_text()
        ):
            assert source in exports, f"{path.name} imports a missing module {source}"
            for name in (n.strip() for n in names.split(",") if n.strip()):
                assert name in exports[source], f"{path.name}: {source} does not export {name}"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_each_module_is_valid_javascript(module: Path) -> None:
    done = subprocess.run(
        ["node", "--input-type=module", "--check"],
        input=module.read_bytes(),
        capture_output=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
