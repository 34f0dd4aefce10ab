"""Config validation against a stack's declared fields, and config -> environment mapping.

``validate_config`` is what job submit and RunSpec resolution call: it checks every given
value against its StackField and fills in defaults. Problems use the spec's RunProblem shape
``{key, code, message}`` with codes ``unknown_key``, ``bad_type``, ``out_of_range`` and
``not_allowed``.

``config_env`` turns a resolved config into the environment the job's process sees: key
``episodes`` becomes ``RUNPLANE_CONFIG_EPISODES`` (upper-cased, ``.`` and ``-`` become
``_``); strings pass through unchanged, every other value is JSON (``true``, ``3``, ``0.25``).
``RUNPLANE_CONFIG`` holds the whole resolved config as one JSON object.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from runplane.stacks.models import Stack, StackField
from runplane.suggest import accepted_phrase

ProblemCode = Literal["unknown_key", "bad_type", "out_of_range", "not_allowed"]

UNKNOWN_KEY: ProblemCode = "unknown_key"
BAD_TYPE: ProblemCode = "bad_type"
OUT_OF_RANGE: ProblemCode = "out_of_range"
NOT_ALLOWED: ProblemCode = "not_allowed"

ENV_PREFIX = "RUNPLANE_CONFIG_"
ENV_ALL = "RUNPLANE_CONFIG"


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One config problem; the spec's RunProblem ``{key, code, message}``."""

    key: str
    code: ProblemCode
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"key": self.key, "code": self.code, "message": self.message}


class ConfigValidation(NamedTuple):
    """``(resolved, problems)``; unpacks like a tuple.

    ``resolved`` holds, in the manifest's field order, every valid given value plus the
    default of each field that was not given (a field without a default is left out).
    Invalid and unknown keys are not in it; it is only meant to be used when ``ok``.
    """

    resolved: dict[str, Any]
    problems: list[ConfigProblem]

    @property
    def ok(self) -> bool:
        return not self.problems


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    if _is_int(value):
        return True
    return isinstance(value, float) and math.isfinite(value)


def _is_scalar(value: object) -> bool:
    return isinstance(value, str | bool) or _is_number(value)


def json_type(value: object) -> str:
    """The JSON name of a value's type, for messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def same_value(a: object, b: object) -> bool:
    """Equality without Python's ``True == 1``: booleans only equal booleans."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if _is_number(a) and _is_number(b):
        return a == b
    return type(a) is type(b) and a == b


def _show(value: object) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _range_text(field: StackField) -> str:
    kind = "an integer" if field.type == "int" else "a number"
    if field.min is not None and field.max is not None:
        return f"{kind} from {_show(field.min)} to {_show(field.max)}"
    if field.min is not None:
        return f"{kind} >= {_show(field.min)}"
    if field.max is not None:
        return f"{kind} <= {_show(field.max)}"
    return kind


_EXPECTED = {
    "int": "an integer",
    "number": "a number",
    "bool": "a boolean (true or false)",
    "string": "a string",
}


def check_value(field: StackField, value: object, key: str | None = None) -> ConfigProblem | None:
    """Check one value against its field; ``None`` when it is acceptable.

    ``key`` names the problem (default: the field's key), e.g. a dotted layer path.
    """
    key = field.key if key is None else key

    def bad_type(expected: str) -> ConfigProblem:
        got = f"{json_type(value)} {_show(value)}"
        return ConfigProblem(key, BAD_TYPE, f"{key}: expected {expected}, got {got}")

    if field.type in ("enum", "select"):
        accepted = ", ".join(_show(v) for v in field.values)
        if not _is_scalar(value):
            return bad_type(f"one of {accepted}")
        if not any(same_value(value, allowed) for allowed in field.values):
            return ConfigProblem(
                key, NOT_ALLOWED, f"{key}: {_show(value)} is not allowed; accepted: {accepted}"
            )
        return None
    if field.type == "bool":
        return None if isinstance(value, bool) else bad_type(_EXPECTED["bool"])
    if field.type == "string":
        return None if isinstance(value, str) else bad_type(_EXPECTED["string"])
    # int and number
    if not (_is_int(value) if field.type == "int" else _is_number(value)):
        return bad_type(_EXPECTED[field.type])
    assert isinstance(value, int | float)
    if field.min is not None and value < field.min:
        return ConfigProblem(
            key,
            OUT_OF_RANGE,
            f"{key}: {_show(value)} is below the minimum {_show(field.min)}; "
            f"accepted: {_range_text(field)}",
        )
    if field.max is not None and value > field.max:
        return ConfigProblem(
            key,
            OUT_OF_RANGE,
            f"{key}: {_show(value)} is above the maximum {_show(field.max)}; "
            f"accepted: {_range_text(field)}",
        )
    return None


def _unknown_key(stack: Stack, key: str) -> ConfigProblem:
    known = [item.key for item in stack.config]
    if not known:
        return ConfigProblem(
            key, UNKNOWN_KEY, f"unknown config key {key!r}: stack {stack.name!r} takes no config"
        )
    return ConfigProblem(
        key,
        UNKNOWN_KEY,
        f"unknown config key {key!r} for stack {stack.name!r}; {accepted_phrase(known, key)}",
    )


def validate_config(stack: Stack, config: Mapping[str, Any] | None) -> ConfigValidation:
    """Validate ``config`` against ``stack``'s fields and fill in defaults.

    Rules: booleans are not integers; an integer is accepted where a number is expected
    (and stays an integer); null is a ``bad_type`` for every field; ``enum`` and ``select``
    values must equal one of the field's ``values`` (``true`` does not equal ``1``).
    Problems come in the order of ``config``'s keys.
    """
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        problem = ConfigProblem(
            "config",
            BAD_TYPE,
            f"config: expected an object of key -> value, got {json_type(config)}",
        )
        return ConfigValidation({}, [problem])
    fields = {item.key: item for item in stack.config}
    problems: list[ConfigProblem] = []
    given: dict[str, Any] = {}
    for raw_key, value in config.items():
        key = str(raw_key)
        field = fields.get(key) if isinstance(raw_key, str) else None
        if field is None:
            problems.append(_unknown_key(stack, key))
            continue
        problem = check_value(field, value)
        if problem is None:
            given[key] = value
        else:
            problems.append(problem)
    resolved: dict[str, Any] = {}
    for item in stack.config:
        if item.key in given:
            resolved[item.key] = given[item.key]
        elif item.key not in config and item.default is not None:
            resolved[item.key] = item.default
    return ConfigValidation(resolved, problems)


def config_env_name(key: str) -> str:
    """``episodes`` -> ``RUNPLANE_CONFIG_EPISODES``; ``.`` and ``-`` become ``_``."""
    return ENV_PREFIX + key.upper().replace(".", "_").replace("-", "_")


def config_env_value(value: object) -> str:
    """Strings as they are; anything else as JSON (``true``, ``false``, ``3``, ``0.25``)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def config_env(resolved: Mapping[str, Any]) -> dict[str, str]:
    """The environment a job gets from its resolved config.

    One ``RUNPLANE_CONFIG_<KEY>`` per key (see :func:`config_env_name`,
    :func:`config_env_value`) plus ``RUNPLANE_CONFIG``: the whole config as compact JSON
    with sorted keys, for programs that want typed values.
    """
    env = {config_env_name(key): config_env_value(value) for key, value in resolved.items()}
    env[ENV_ALL] = json.dumps(dict(resolved), separators=(",", ":"), sort_keys=True)
    return env
