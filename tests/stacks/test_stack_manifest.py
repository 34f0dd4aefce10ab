"""Manifest parsing: shapes (strict models) and consistency rules, with field paths."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from runplane.stacks import (
    ManifestError,
    ManifestInvalid,
    Stack,
    parse_manifest,
    parse_manifest_text,
)

BASE: dict[str, Any] = {
    "name": "demo",
    "version": "1.0",
    "image": "debian:bookworm-slim",
    "default_command": ["sh", "-c", "echo hi"],
}


def with_(**changes: Any) -> dict[str, Any]:
    return {**BASE, **changes}


def field(**kw: Any) -> dict[str, Any]:
    return {"key": "n", "type": "int", **kw}


def launch(task: dict[str, Any]) -> dict[str, Any]:
    return {"tasks": [{"id": "t", "title": "T", **task}]}


def errors_of(data: dict[str, Any]) -> list[ManifestError]:
    with pytest.raises(ManifestInvalid) as info:
        parse_manifest(data, "demo.toml")
    return info.value.errors


def test_minimal_manifest_gets_defaults() -> None:
    stack = parse_manifest(BASE)
    assert stack.modes == ["run"]
    assert stack.display_name == "demo"
    assert stack.launch is None
    assert stack.unavailable is False
    assert stack.requires.gpu.required is False
    assert stack.requires.gpu.min_vram_gb == 0
    assert stack.config == [] and stack.examples == [] and stack.default_outputs == []


def test_full_manifest_parses(minimal: Callable[..., str]) -> None:
    text = minimal(
        "full",
        """
modes = ["run", "session"]
display_name = "Full"
description = "d"
categories = ["a", "b"]
docs = "docs"
unavailable = true

[requires.gpu]
required = true
min_vram_gb = 16
[requires.cpu]
min_cores = 4
[requires.ram]
min_gb = 8

[[config]]
key = "lr"
type = "number"
default = 1
min = 0
max = 0.5e1
description = "learning rate"

[[config]]
key = "algo"
type = "select"
values = ["ppo", "sac"]
default = "sac"

[[metrics]]
key = "loss"
higher_is_better = false

[[default_outputs]]
artifact = "model"
glob = "out/*.pt"
optional = true

[[examples]]
name = "ex"
setup = "pip install x"
run = "python main.py"
code = "print(1)"
gpu = true
display = true

[launch]
cover = "c.png"
badge = "new"
featured = true

[[launch.tasks]]
id = "train"
title = "Train"
command = ["python", "train.py"]
settings = ["lr"]
config = { algo = "ppo" }

[[launch.tasks.presets]]
id = "fast"
title = "Fast"
config = { lr = 0.25 }
""",
    )
    stack = parse_manifest_text(text, "full.toml")
    assert stack.display_name == "Full"
    assert stack.requires.gpu.min_vram_gb == 16
    assert stack.config[0].default == 1  # an int default is fine for a number field
    assert stack.config[0].max == 5.0
    assert stack.launch is not None
    assert stack.launch.tasks[0].presets[0].config == {"lr": 0.25}
    assert stack.examples[0].gpu is True


@pytest.mark.parametrize(
    ("data", "path", "code"),
    [
        # names
        (with_(name="Bad Name"), "name", "invalid"),
        (with_(name="-leading"), "name", "invalid"),
        (with_(name="UPPER"), "name", "invalid"),
        (with_(version=" "), "version", "invalid"),
        (with_(image=""), "image", "invalid"),
        # shapes: unknown keys, types, missing keys
        (with_(colour="red"), "colour", "unknown_key"),
        (with_(requires={"gpu": {"vram": 8}}), "requires.gpu.vram", "unknown_key"),
        (with_(config=[field(defualt=3)]), "config[0].defualt", "unknown_key"),
        (with_(launch={"tasks": [], "featurd": True}), "launch.featurd", "unknown_key"),
        (with_(launch={"featured": "yes"}), "launch.featured", "bad_type"),
        (with_(modes=["batch"]), "modes[0]", "bad_type"),
        (with_(config=[field(type="float")]), "config[0].type", "bad_type"),
        (with_(default_command="echo hi"), "default_command", "bad_type"),
        (with_(requires={"gpu": {"min_vram_gb": -1}}), "requires.gpu.min_vram_gb", "invalid"),
        (with_(requires={"cpu": {"min_cores": 1.5}}), "requires.cpu.min_cores", "bad_type"),
        (with_(unavailable=1), "unavailable", "bad_type"),
        ({k: v for k, v in BASE.items() if k != "image"}, "image", "missing_key"),
        (with_(examples=[{"description": "x"}]), "examples[0].name", "missing_key"),
        (with_(launch=launch({"title": "x", "id": 3})), "launch.tasks[0].id", "bad_type"),
        # modes and lists
        (with_(modes=[]), "modes", "invalid"),
        (with_(modes=["run", "run"]), "modes", "invalid"),
        (with_(categories=["a", "a"]), "categories", "invalid"),
        # config fields
        (with_(config=[field(type="enum")]), "config[0].values", "invalid"),
        (with_(config=[field(type="select", values=[])]), "config[0].values", "invalid"),
        (with_(config=[field(type="enum", values=["a", "a"])]), "config[0].values", "invalid"),
        (with_(config=[field(type="select", values=[1, 1.0])]), "config[0].values", "invalid"),
        (with_(config=[field(type="enum", values=[["a"]])]), "config[0].values[0]", "invalid"),
        (with_(config=[field(values=[1, 2])]), "config[0].values", "invalid"),
        (with_(config=[field(min=1, max=5, default=6)]), "config[0].default", "invalid"),
        (with_(config=[field(min=1, default=0)]), "config[0].default", "invalid"),
        (with_(config=[field(default="3")]), "config[0].default", "invalid"),
        (with_(config=[field(default=True)]), "config[0].default", "invalid"),
        (with_(config=[field(type="number", default=True)]), "config[0].default", "invalid"),
        (with_(config=[field(type="bool", default=0)]), "config[0].default", "invalid"),
        (with_(config=[field(type="string", default=1)]), "config[0].default", "invalid"),
        (
            with_(config=[field(type="enum", values=["a", "b"], default="c")]),
            "config[0].default",
            "invalid",
        ),
        (with_(config=[field(min=5, max=1)]), "config[0].min", "invalid"),
        (with_(config=[field(min="1")]), "config[0].min", "bad_type"),
        (with_(config=[field(max=True)]), "config[0].max", "bad_type"),
        (with_(config=[field(min=0.5)]), "config[0].min", "invalid"),
        (with_(config=[field(type="string", max=3)]), "config[0].max", "invalid"),
        (with_(config=[field(type="number", max=float("inf"))]), "config[0].max", "invalid"),
        (with_(config=[field(key="bad key")]), "config[0].key", "invalid"),
        (with_(config=[field(), field(type="bool")]), "config[1].key", "invalid"),
        (with_(config=[field(key="a-b"), field(key="a_b")]), "config[1].key", "invalid"),
        # metrics, outputs, examples
        (with_(metrics=[{"key": "r"}, {"key": "r"}]), "metrics[1].key", "invalid"),
        (
            with_(default_outputs=[{"artifact": "a", "glob": "/etc/*"}]),
            "default_outputs[0].glob",
            "invalid",
        ),
        (
            with_(default_outputs=[{"artifact": "a", "glob": "../x"}]),
            "default_outputs[0].glob",
            "invalid",
        ),
        (
            with_(default_outputs=[{"artifact": "", "glob": "x"}]),
            "default_outputs[0].artifact",
            "invalid",
        ),
        (with_(examples=[{"name": "e"}, {"name": "e"}]), "examples[1].name", "invalid"),
        # launch: ids, settings and config maps checked against the stack's fields
        (
            with_(launch={"tasks": [{"id": "t", "title": "A"}, {"id": "t", "title": "B"}]}),
            "launch.tasks[1].id",
            "invalid",
        ),
        (with_(launch=launch({"title": ""})), "launch.tasks[0].title", "invalid"),
        (with_(launch=launch({"config": {"nope": 1}})), "launch.tasks[0].config.nope", "invalid"),
        (with_(launch=launch({"settings": ["nope"]})), "launch.tasks[0].settings[0]", "invalid"),
        (
            with_(
                config=[field(max=3)],
                launch=launch({"presets": [{"id": "p", "title": "P", "config": {"n": 9}}]}),
            ),
            "launch.tasks[0].presets[0].config.n",
            "invalid",
        ),
        (
            with_(
                launch=launch({"presets": [{"id": "p", "title": "P"}, {"id": "p", "title": "Q"}]})
            ),
            "launch.tasks[0].presets[1].id",
            "invalid",
        ),
    ],
)
def test_invalid_manifest_reports_field(data: dict[str, Any], path: str, code: str) -> None:
    errors = errors_of(data)
    assert (path, code) in [(e.field, e.code) for e in errors], errors
    assert all(e.file == "demo.toml" for e in errors)
    assert all(e.message for e in errors)


def test_unknown_key_message_names_accepted_keys() -> None:
    [error] = errors_of(with_(requires={"gpu": {"vram": 8}}))
    assert "min_vram_gb" in error.message and "required" in error.message


def test_default_problem_message_is_specific() -> None:
    [error] = errors_of(with_(config=[field(min=1, max=5, default=6)]))
    assert "above the maximum 5" in error.message


def test_every_problem_of_a_file_is_reported() -> None:
    data = with_(
        name="Bad",
        config=[field(type="enum"), field(key="m", min=3, default=1)],
        metrics=[{"key": "r"}, {"key": "r"}],
    )
    fields = {e.field for e in errors_of(data)}
    assert {"name", "config[0].values", "config[1].default", "metrics[1].key"} <= fields


def test_toml_syntax_error_has_file_and_position() -> None:
    with pytest.raises(ManifestInvalid) as info:
        parse_manifest_text('name = "x"\nversion = \n', "broken.toml")
    [error] = info.value.errors
    assert (error.file, error.field, error.code) == ("broken.toml", "", "toml_syntax")
    assert "line 2" in error.message
    assert str(error).startswith("broken.toml: ")


def test_toml_datetime_default_is_rejected() -> None:
    text = 'name = "x"\nversion = "1"\nimage = "i"\n[[config]]\nkey = "d"\ntype = "string"\ndefault = 2024-01-01\n'
    with pytest.raises(ManifestInvalid) as info:
        parse_manifest_text(text, "d.toml")
    assert [e.field for e in info.value.errors] == ["config[0].default"]


def test_direct_model_construction_runs_consistency_checks() -> None:
    with pytest.raises(ValidationError, match="needs a non-empty values list"):
        Stack.model_validate(with_(config=[field(type="enum")]))
    assert Stack.model_validate(BASE).name == "demo"


def test_manifest_error_as_dict() -> None:
    error = ManifestError("f.toml", "config[0].default", "invalid", "m")
    assert error.as_dict() == {
        "file": "f.toml",
        "field": "config[0].default",
        "code": "invalid",
        "message": "m",
    }


def test_stack_helpers() -> None:
    stack = parse_manifest(with_(config=[field(default=2)]))
    assert stack.config_field("n") is stack.config[0]
    assert stack.config_field("m") is None
    assert stack.command_or_default(None) == ["sh", "-c", "echo hi"]
    assert stack.command_or_default([]) == ["sh", "-c", "echo hi"]
    assert stack.command_or_default(["true"]) == ["true"]


def test_stack_is_frozen() -> None:
    stack = parse_manifest(BASE)
    with pytest.raises(ValidationError):
        stack.name = "other"  # type: ignore[misc]


def test_docs_example_manifest_is_valid() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "stacks.md"
    if not docs.exists():
        pytest.skip("docs/stacks.md not present")
    text = docs.read_text(encoding="utf-8")
    block = text.split("```toml\n", 1)[1].split("```", 1)[0]
    stack = parse_manifest_text(block, "docs/stacks.md")
    assert stack.launch is not None and stack.config
