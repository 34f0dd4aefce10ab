"""Shared helpers for the stack catalog tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from runplane.stacks import Catalog, Stack, load_catalog

MINIMAL = """
name = "{name}"
version = "1.0"
image = "debian:bookworm-slim"
default_command = ["sh", "-c", "echo hi"]
"""


def minimal_manifest(name: str = "demo", extra: str = "") -> str:
    """A valid manifest text, with ``extra`` TOML appended (top-level keys go first)."""
    return MINIMAL.format(name=name) + extra


@pytest.fixture
def minimal() -> Callable[..., str]:
    return minimal_manifest


@pytest.fixture
def builtin_catalog() -> Catalog:
    return load_catalog(None)


@pytest.fixture
def stacks_dir(tmp_path: Path) -> Path:
    path = tmp_path / "stacks"
    path.mkdir()
    return path


@pytest.fixture
def write_manifest(stacks_dir: Path) -> Callable[[str, str], Path]:
    def write(filename: str, text: str) -> Path:
        path = stacks_dir / filename
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def builtin_stacks(builtin_catalog: Catalog) -> list[Stack]:
    return builtin_catalog.list()
