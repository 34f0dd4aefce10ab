"""Loading the catalog: built-ins, the extra directory, overrides and error reporting."""

from __future__ import annotations

import logging
from collections.abc import Callable
from importlib import resources
from pathlib import Path

import pytest

import runplane.stacks.catalog as catalog_module
from runplane.stacks import BUILTIN, Catalog, Stack, load_catalog

BUILTIN_NAMES = {"shell", "python", "sim-cartpole"}

BROKEN = {
    "syntax.toml": ('name = "syntax"\nversion = "1\n', "", "toml_syntax"),
    "unknown.toml": (
        'name = "unknown"\nversion = "1"\nimage = "i"\ncolour = "red"\n',
        "colour",
        "unknown_key",
    ),
    "range.toml": (
        'name = "range"\nversion = "1"\nimage = "i"\n'
        '[[config]]\nkey = "n"\ntype = "int"\nmin = 1\nmax = 10\ndefault = 11\n',
        "config[0].default",
        "invalid",
    ),
    "enum.toml": (
        'name = "enum"\nversion = "1"\nimage = "i"\n[[config]]\nkey = "e"\ntype = "enum"\n',
        "config[0].values",
        "invalid",
    ),
}


def test_builtins_load_without_errors(builtin_catalog: Catalog) -> None:
    assert builtin_catalog.errors == ()
    assert set(builtin_catalog.names()) >= BUILTIN_NAMES
    for name in BUILTIN_NAMES:
        assert builtin_catalog.origin(name) == BUILTIN


def test_builtin_manifests_ship_inside_the_package() -> None:
    root = resources.files("runplane.stacks").joinpath("builtin")
    names = {e.name for e in root.iterdir() if e.name.endswith(".toml")}
    assert {"shell.toml", "python.toml", "sim-cartpole.toml"} <= names


def test_get_list_and_container_protocol(builtin_catalog: Catalog) -> None:
    listed = builtin_catalog.list()
    assert [s.name for s in listed] == sorted(s.name for s in listed)
    assert builtin_catalog.names() == [s.name for s in listed]
    assert [s.name for s in builtin_catalog] == builtin_catalog.names()
    assert len(builtin_catalog) == len(listed)
    shell = builtin_catalog.get("shell")
    assert isinstance(shell, Stack) and shell.name == "shell"
    assert builtin_catalog.get("nope") is None
    assert "shell" in builtin_catalog and "nope" not in builtin_catalog
    assert builtin_catalog.origin("nope") is None


def test_builtin_shapes(builtin_catalog: Catalog) -> None:
    shell = builtin_catalog.get("shell")
    python = builtin_catalog.get("python")
    sim = builtin_catalog.get("sim-cartpole")
    assert shell is not None and python is not None and sim is not None
    assert shell.image == "debian:bookworm-slim"
    assert shell.default_command[:2] == ["sh", "-c"]
    assert python.config, "python declares config fields"
    assert {f.key for f in sim.config} >= {"episodes", "policy"}
    assert [o.glob for o in sim.default_outputs if not o.optional] == ["out/trajectory.csv"]
    assert {m.key for m in sim.metrics} >= {"reward"}
    assert sim.launch is not None and sim.launch.tasks


@pytest.mark.parametrize("filename", sorted(BROKEN))
def test_broken_manifest_is_reported_and_skipped(
    filename: str,
    write_manifest: Callable[[str, str], Path],
    stacks_dir: Path,
    minimal: Callable[..., str],
) -> None:
    text, field, code = BROKEN[filename]
    bad = write_manifest(filename, text)
    write_manifest("good.toml", minimal("good"))
    catalog = load_catalog(stacks_dir)
    assert [(e.file, e.field, e.code) for e in catalog.errors] == [(str(bad), field, code)]
    assert catalog.errors[0].message
    assert set(catalog.names()) == BUILTIN_NAMES | {"good"}


def test_all_broken_manifests_together(
    write_manifest: Callable[[str, str], Path], stacks_dir: Path, minimal: Callable[..., str]
) -> None:
    paths = {name: write_manifest(name, text) for name, (text, _, _) in BROKEN.items()}
    write_manifest("good.toml", minimal("good"))
    catalog = load_catalog(stacks_dir)
    reported = {(e.file, e.field) for e in catalog.errors}
    assert reported == {(str(paths[name]), BROKEN[name][1]) for name in BROKEN}
    assert set(catalog.names()) == BUILTIN_NAMES | {"good"}


def test_broken_manifest_is_logged_as_structured_warning(
    write_manifest: Callable[[str, str], Path], stacks_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    text, field, code = BROKEN["range.toml"]
    bad = write_manifest("range.toml", text)
    with caplog.at_level(logging.WARNING, logger="runplane.stacks"):
        load_catalog(stacks_dir)
    [record] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert record.name == "runplane.stacks"
    assert record.__dict__["manifest"] == str(bad)
    assert record.__dict__["field"] == field
    assert record.__dict__["code"] == code
    assert "above the maximum" in record.__dict__["problem"]


def test_extra_manifest_overrides_builtin(
    write_manifest: Callable[[str, str], Path], stacks_dir: Path, minimal: Callable[..., str]
) -> None:
    path = write_manifest("my-shell.toml", minimal("shell").replace('"1.0"', '"9.9"'))
    catalog = load_catalog(stacks_dir)
    assert catalog.errors == ()
    shell = catalog.get("shell")
    assert shell is not None and shell.version == "9.9"
    assert catalog.origin("shell") == str(path)
    assert catalog.origin("python") == BUILTIN
    assert catalog.names().count("shell") == 1


def test_broken_override_keeps_the_builtin(
    write_manifest: Callable[[str, str], Path], stacks_dir: Path, minimal: Callable[..., str]
) -> None:
    write_manifest("shell.toml", minimal("shell") + "bogus = 1\n")
    catalog = load_catalog(stacks_dir)
    assert [e.field for e in catalog.errors] == ["bogus"]
    assert catalog.origin("shell") == BUILTIN


def test_duplicate_name_in_extra_dir_keeps_first_file(
    write_manifest: Callable[[str, str], Path], stacks_dir: Path, minimal: Callable[..., str]
) -> None:
    first = write_manifest("a.toml", minimal("twin"))
    second = write_manifest("b.toml", minimal("twin").replace('"1.0"', '"2.0"'))
    catalog = load_catalog(stacks_dir)
    [error] = catalog.errors
    assert (error.file, error.field, error.code) == (str(second), "name", "duplicate_name")
    assert catalog.origin("twin") == str(first)


def test_only_visible_toml_files_are_read(
    write_manifest: Callable[[str, str], Path], stacks_dir: Path, minimal: Callable[..., str]
) -> None:
    write_manifest(".hidden.toml", "not toml at all [")
    write_manifest("notes.txt", "not toml at all [")
    (stacks_dir / "sub").mkdir()
    (stacks_dir / "sub" / "deep.toml").write_text(minimal("deep"))
    catalog = load_catalog(stacks_dir)
    assert catalog.errors == ()
    assert "deep" not in catalog


def test_missing_extra_dir_is_an_error_not_an_exception(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    catalog = load_catalog(missing)
    assert [(e.file, e.code) for e in catalog.errors] == [(str(missing), "unreadable")]
    assert set(catalog.names()) == BUILTIN_NAMES


def test_undecodable_manifest_is_reported(
    stacks_dir: Path, write_manifest: Callable[[str, str], Path]
) -> None:
    bad = stacks_dir / "latin1.toml"
    bad.write_bytes(b'name = "caf\xe9"\n')
    catalog = load_catalog(stacks_dir)
    assert [(e.file, e.code) for e in catalog.errors] == [(str(bad), "unreadable")]


def test_catalog_can_be_built_directly(builtin_catalog: Catalog) -> None:
    shell = builtin_catalog.get("shell")
    assert shell is not None
    catalog = Catalog([shell])
    assert catalog.names() == ["shell"] and catalog.errors == ()


def test_missing_builtin_dir_is_reported(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    write_manifest: Callable[[str, str], Path],
    stacks_dir: Path,
    minimal: Callable[..., str],
) -> None:
    monkeypatch.setattr(catalog_module, "_builtin_root", lambda: tmp_path / "not-installed")
    write_manifest("good.toml", minimal("good"))
    catalog = load_catalog(stacks_dir)
    assert [e.code for e in catalog.errors] == ["unreadable"]
    assert "missing from the installation" in catalog.errors[0].message
    assert catalog.names() == ["good"]
