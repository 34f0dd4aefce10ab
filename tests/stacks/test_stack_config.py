"""Config validation against a stack's fields, and the config -> environment mapping."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from runplane.stacks import (
    ConfigProblem,
    ConfigValidation,
    Stack,
    check_value,
    config_env,
    config_env_name,
    config_env_value,
    parse_manifest,
    validate_config,
)

STACK = parse_manifest(
    {
        "name": "cfg",
        "version": "1",
        "image": "i",
        "config": [
            {"key": "n", "type": "int", "min": 1, "max": 10, "default": 5},
            {"key": "x", "type": "number", "min": 0, "max": 1, "default": 0.5},
            {"key": "open", "type": "int"},
            {"key": "flag", "type": "bool", "default": False},
            {"key": "mode", "type": "enum", "values": ["a", "b"], "default": "a"},
            {"key": "pick", "type": "select", "values": [1, 2, 3]},
            {"key": "yes", "type": "enum", "values": [True]},
            {"key": "name", "type": "string"},
        ],
    }
)

OK = None
CASES: list[tuple[str, Any, str | None]] = [
    # int
    ("n", 3, OK),
    ("n", 1, OK),
    ("n", 10, OK),
    ("n", 0, "out_of_range"),
    ("n", 11, "out_of_range"),
    ("n", -(2**70), "out_of_range"),
    ("n", 2.5, "bad_type"),
    ("n", 3.0, "bad_type"),
    ("n", True, "bad_type"),
    ("n", "3", "bad_type"),
    ("n", None, "bad_type"),
    ("n", [3], "bad_type"),
    ("open", -(2**63), OK),
    ("open", 2**63, OK),
    # number
    ("x", 0.25, OK),
    ("x", 0, OK),
    ("x", 1, OK),
    ("x", 1.0, OK),
    ("x", -0.001, "out_of_range"),
    ("x", 1.5, "out_of_range"),
    ("x", 2, "out_of_range"),
    ("x", True, "bad_type"),
    ("x", "0.5", "bad_type"),
    ("x", math.nan, "bad_type"),
    ("x", math.inf, "bad_type"),
    ("x", {"v": 1}, "bad_type"),
    # bool
    ("flag", True, OK),
    ("flag", False, OK),
    ("flag", 0, "bad_type"),
    ("flag", 1, "bad_type"),
    ("flag", "true", "bad_type"),
    ("flag", None, "bad_type"),
    # enum
    ("mode", "a", OK),
    ("mode", "b", OK),
    ("mode", "c", "not_allowed"),
    ("mode", "A", "not_allowed"),
    ("mode", 1, "not_allowed"),
    ("mode", ["a"], "bad_type"),
    ("mode", None, "bad_type"),
    # select
    ("pick", 2, OK),
    ("pick", 2.0, OK),
    ("pick", 4, "not_allowed"),
    ("pick", "2", "not_allowed"),
    ("pick", True, "not_allowed"),
    ("pick", {"v": 2}, "bad_type"),
    # enum of booleans: 1 is not True
    ("yes", True, OK),
    ("yes", 1, "not_allowed"),
    # string
    ("name", "", OK),
    ("name", "hello", OK),
    ("name", 5, "bad_type"),
    ("name", False, "bad_type"),
    ("name", None, "bad_type"),
    # unknown
    ("nope", 1, "unknown_key"),
    ("N", 1, "unknown_key"),
]


@pytest.mark.parametrize(("key", "value", "code"), CASES)
def test_validate_config_table(key: str, value: Any, code: str | None) -> None:
    resolved, problems = validate_config(STACK, {key: value})
    if code is None:
        assert problems == []
        assert resolved[key] == value and type(resolved[key]) is type(value)
    else:
        assert [(p.key, p.code) for p in problems] == [(key, code)]
        assert key in problems[0].message
        assert key not in resolved


def test_every_problem_code_is_covered() -> None:
    assert {c for _, _, c in CASES} - {None} == {
        "unknown_key",
        "bad_type",
        "out_of_range",
        "not_allowed",
    }


def test_defaults_fill_missing_keys_in_manifest_order() -> None:
    resolved, problems = validate_config(STACK, {"name": "z", "n": 7})
    assert problems == []
    assert list(resolved) == ["n", "x", "flag", "mode", "name"]
    assert resolved == {"n": 7, "x": 0.5, "flag": False, "mode": "a", "name": "z"}


def test_field_without_default_is_left_out() -> None:
    resolved, _ = validate_config(STACK, {})
    assert "open" not in resolved and "pick" not in resolved and "name" not in resolved


def test_none_config_means_all_defaults() -> None:
    assert validate_config(STACK, None) == validate_config(STACK, {})


def test_invalid_value_is_not_replaced_by_its_default() -> None:
    resolved, problems = validate_config(STACK, {"n": 99})
    assert [p.code for p in problems] == ["out_of_range"]
    assert "n" not in resolved


def test_problems_follow_input_order() -> None:
    _, problems = validate_config(STACK, {"zzz": 1, "flag": "no", "n": 0})
    assert [(p.key, p.code) for p in problems] == [
        ("zzz", "unknown_key"),
        ("flag", "bad_type"),
        ("n", "out_of_range"),
    ]


def test_messages_say_what_is_accepted() -> None:
    _, [problem] = validate_config(STACK, {"n": 0})
    assert problem.message == "n: 0 is below the minimum 1; accepted: an integer from 1 to 10"
    _, [problem] = validate_config(STACK, {"mode": "c"})
    assert problem.message == 'mode: "c" is not allowed; accepted: "a", "b"'
    _, [problem] = validate_config(STACK, {"flag": 1})
    assert problem.message == "flag: expected a boolean (true or false), got integer 1"
    _, [problem] = validate_config(STACK, {"flga": True})
    assert problem.message == (
        f"unknown config key 'flga' for stack {STACK.name!r}; "
        "accepted: n, x, open, flag, mode, pick, yes, name (did you mean 'flag'?)"
    )
    _, [problem] = validate_config(STACK, {"zzz": True})
    assert problem.message == (
        f"unknown config key 'zzz' for stack {STACK.name!r}; "
        "accepted: n, x, open, flag, mode, pick, yes, name"
    )


def test_stack_without_config_says_so() -> None:
    bare = parse_manifest({"name": "bare", "version": "1", "image": "i"})
    _, [problem] = validate_config(bare, {"a": 1})
    assert problem.code == "unknown_key"
    assert "takes no config" in problem.message


def test_non_mapping_config_is_a_bad_type() -> None:
    resolved, problems = validate_config(STACK, [1, 2])  # type: ignore[arg-type]
    assert resolved == {}
    assert [(p.key, p.code) for p in problems] == [("config", "bad_type")]


def test_non_string_key_is_unknown() -> None:
    _, problems = validate_config(STACK, {1: 2})  # type: ignore[dict-item]
    assert [(p.key, p.code) for p in problems] == [("1", "unknown_key")]


def test_validation_result_shape() -> None:
    result = validate_config(STACK, {"n": 2})
    assert isinstance(result, ConfigValidation) and result.ok
    resolved, problems = result
    assert resolved is result.resolved and problems is result.problems
    assert not validate_config(STACK, {"n": 0}).ok


def test_problem_is_frozen_slotted_and_serialisable() -> None:
    problem = ConfigProblem("n", "out_of_range", "m")
    assert problem.as_dict() == {"key": "n", "code": "out_of_range", "message": "m"}
    assert not hasattr(problem, "__dict__")
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.key = "m"  # type: ignore[misc]


def test_check_value_with_custom_key() -> None:
    field = STACK.config_field("n")
    assert field is not None
    assert check_value(field, 3) is None
    problem = check_value(field, 0, key="layers.org.n")
    assert problem is not None and problem.key == "layers.org.n"
    assert problem.message.startswith("layers.org.n: ")


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("episodes", "RUNPLANE_CONFIG_EPISODES"),
        ("max_steps", "RUNPLANE_CONFIG_MAX_STEPS"),
        ("learningRate", "RUNPLANE_CONFIG_LEARNINGRATE"),
        ("model.depth", "RUNPLANE_CONFIG_MODEL_DEPTH"),
        ("use-gpu", "RUNPLANE_CONFIG_USE_GPU"),
    ],
)
def test_config_env_name(key: str, name: str) -> None:
    assert config_env_name(key) == name


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("hello world", "hello world"),
        ("", ""),
        ('{"a": 1}', '{"a": 1}'),
        (True, "true"),
        (False, "false"),
        (3, "3"),
        (-7, "-7"),
        (0.25, "0.25"),
        (1e-05, "1e-05"),
        (2.0, "2.0"),
    ],
)
def test_config_env_value(value: Any, text: str) -> None:
    assert config_env_value(value) == text


def test_config_env_from_resolved_config() -> None:
    resolved, _ = validate_config(STACK, {"name": "run 1", "flag": True, "x": 1})
    env = config_env(resolved)
    assert env == {
        "RUNPLANE_CONFIG_N": "5",
        "RUNPLANE_CONFIG_X": "1",
        "RUNPLANE_CONFIG_FLAG": "true",
        "RUNPLANE_CONFIG_MODE": "a",
        "RUNPLANE_CONFIG_NAME": "run 1",
        "RUNPLANE_CONFIG": '{"flag":true,"mode":"a","n":5,"name":"run 1","x":1}',
    }
    assert json.loads(env["RUNPLANE_CONFIG"]) == resolved


def test_config_env_of_empty_config() -> None:
    assert config_env({}) == {"RUNPLANE_CONFIG": "{}"}


def test_builtin_defaults_are_valid(builtin_stacks: list[Stack]) -> None:
    for stack in builtin_stacks:
        resolved, problems = validate_config(stack, {})
        assert problems == [], stack.name
        assert set(resolved) == {f.key for f in stack.config if f.default is not None}
