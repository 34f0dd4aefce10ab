"""The README's CLI row names every verb `runplane --help` lists (it once listed only
serve, agent and --version while a dozen client verbs existed)."""

from __future__ import annotations

import re
from pathlib import Path

from runplane.cli import main  # noqa: F401  (adds serve and agent to the group)
from runplane.client.cli import cli

README = Path(__file__).resolve().parent.parent / "README.md"


def test_the_readme_cli_row_names_every_verb() -> None:
    row = next(line for line in README.read_text().splitlines() if line.startswith("| CLI ("))
    missing = [
        name
        for name, command in cli.commands.items()
        if not command.hidden and not re.search(rf"`(runplane )?{re.escape(name)}[` \[]", row)
    ]
    assert not missing, f"README's CLI row does not name: {missing}"
