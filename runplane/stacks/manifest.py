"""Reading one stack manifest (a TOML file) into a :class:`Stack`, or a list of errors.

A manifest goes through three gates, each reporting every problem it finds with the field
path it sits at (``config[1].default``, ``launch.tasks[0].presets[2].id``):

1. TOML syntax (``tomllib``); field ``""``.
2. Shape: the strict pydantic models (unknown keys, wrong types, missing keys).
3. Consistency (:func:`manifest_issues`): a default satisfies its own field, enum/select
   fields have values, keys and ids are unique, the name matches ``[a-z0-9][a-z0-9._-]*``,
   launch task/preset config is valid for the stack, ...
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, ValidationError

from runplane.stacks.config import check_value, config_env_name, same_value, validate_config
from runplane.stacks.models import SKIP_CHECKS, LaunchTask, Stack, StackField, StackLaunch

NAME_RE = re.compile(r"[a-z0-9][a-z0-9._-]*")
CONFIG_KEY_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")

# ManifestError codes.
UNREADABLE = "unreadable"
TOML_SYNTAX = "toml_syntax"
UNKNOWN_KEY = "unknown_key"
MISSING_KEY = "missing_key"
BAD_TYPE = "bad_type"
INVALID = "invalid"
DUPLICATE_NAME = "duplicate_name"


@dataclass(frozen=True, slots=True)
class ManifestError:
    """One problem with one manifest file.

    ``field`` is the path inside the manifest (``""`` when the file as a whole is at
    fault: unreadable, TOML syntax); ``code`` is one of the module's code constants.
    """

    file: str
    field: str
    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"file": self.file, "field": self.field, "code": self.code, "message": self.message}

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}"


class ManifestInvalid(Exception):
    """A manifest that cannot be loaded; ``errors`` lists every problem found."""

    def __init__(self, errors: list[ManifestError]) -> None:
        super().__init__("; ".join(str(e) for e in errors))
        self.errors = errors


def field_path(loc: Iterable[int | str]) -> str:
    """``("config", 2, "default")`` -> ``config[2].default``."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _model_at(loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The model class that holds the last part of ``loc`` (for 'accepted keys' hints)."""
    model: type[BaseModel] = Stack
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        info = model.model_fields.get(part)
        if info is None:
            return None
        found = _inner_model(info.annotation)
        if found is None:
            return None
        model = found
    return model


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _shape_errors(file: str, exc: ValidationError) -> list[ManifestError]:
    errors: list[ManifestError] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        path = field_path(loc)
        kind = err["type"]
        if kind == "extra_forbidden":
            model = _model_at(loc)
            accepted = f"; accepted: {', '.join(model.model_fields)}" if model else ""
            errors.append(ManifestError(file, path, UNKNOWN_KEY, f"unknown key{accepted}"))
        elif kind == "missing":
            errors.append(ManifestError(file, path, MISSING_KEY, "required key is missing"))
        else:
            code = BAD_TYPE if kind.endswith("_type") or kind == "literal_error" else INVALID
            got = err.get("input")
            shown = type(got).__name__ if isinstance(got, dict | list) else repr(got)
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            errors.append(ManifestError(file, path, code, f"{err['msg']} (got {shown})"))
    return errors


def _duplicates(items: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    dupes: set[str] = set()
    for item in items:
        (dupes if item in seen else seen).add(item)
    return dupes


def _is_bound(value: object) -> bool:
    """A finite int or float (TOML also has inf and nan, which JSON cannot carry)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value)


def _field_issues(path: str, field: StackField) -> list[tuple[str, str]]:
    issues: list[tuple[str, str]] = []
    if not CONFIG_KEY_RE.fullmatch(field.key):
        issues.append(
            (f"{path}.key", f"{field.key!r} is not a valid key; accepted: [A-Za-z_][A-Za-z0-9_.-]*")
        )
    choice = field.type in ("enum", "select")
    if choice:
        if not field.values:
            issues.append((f"{path}.values", f"a {field.type} field needs a non-empty values list"))
        for j, value in enumerate(field.values):
            if not (isinstance(value, str | bool) or _is_bound(value)):
                issues.append(
                    (f"{path}.values[{j}]", "values must be strings, finite numbers or booleans")
                )
        values = field.values
        if any(same_value(v, w) for i, v in enumerate(values) for w in values[:i]):
            issues.append((f"{path}.values", "values must be unique"))
    elif field.values:
        issues.append(
            (f"{path}.values", f"values only apply to enum and select fields, not {field.type}")
        )
    numeric = field.type in ("int", "number")
    for bound in ("min", "max"):
        value = getattr(field, bound)
        if value is None:
            continue
        if not numeric:
            issues.append((f"{path}.{bound}", f"{bound} only applies to int and number fields"))
        elif not _is_bound(value):
            issues.append((f"{path}.{bound}", f"{bound} must be a finite number"))
        elif field.type == "int" and not isinstance(value, int):
            issues.append((f"{path}.{bound}", f"{bound} of an int field must be an integer"))
    if numeric and field.min is not None and field.max is not None and field.min > field.max:
        issues.append((f"{path}.min", f"min {field.min} is greater than max {field.max}"))
    if field.default is not None and not (choice and not field.values):
        problem = check_value(field, field.default, key="default")
        if problem is not None:
            issues.append((f"{path}.default", problem.message.removeprefix("default: ")))
    return issues


def _config_map_issues(stack: Stack, path: str, config: Mapping[str, Any]) -> list[tuple[str, str]]:
    _, problems = validate_config(stack, config)
    return [(f"{path}.{p.key}", p.message) for p in problems]


Issues = list[tuple[str, str]]


def manifest_issues(stack: Stack) -> Issues:
    """Every consistency problem of a shape-valid stack, as ``(field path, message)``."""
    return [
        *_header_issues(stack),
        *_config_issues(stack),
        *_metric_issues(stack),
        *_output_issues(stack),
        *_example_issues(stack),
        *(_launch_issues(stack, stack.launch) if stack.launch is not None else []),
    ]


def _header_issues(stack: Stack) -> Issues:
    """The name, version, image, modes and categories."""
    issues: Issues = []
    if not NAME_RE.fullmatch(stack.name):
        issues.append(
            ("name", f"{stack.name!r} is not a valid name; accepted: [a-z0-9][a-z0-9._-]*")
        )
    for key in ("version", "image"):
        if not getattr(stack, key).strip():
            issues.append((key, f"{key} must not be empty"))
    if not stack.modes:
        issues.append(("modes", "at least one mode (run, session) is needed"))
    if _duplicates(stack.modes):
        issues.append(("modes", "modes must be unique"))
    if _duplicates(stack.categories):
        issues.append(("categories", "categories must be unique"))
    return issues


def _config_issues(stack: Stack) -> Issues:
    """Each config field, and keys unique (as keys and as environment variable names)."""
    issues: Issues = []
    keys = [f.key for f in stack.config]
    env_names = [config_env_name(k) for k in keys]
    for i, field in enumerate(stack.config):
        issues.extend(_field_issues(f"config[{i}]", field))
        first = env_names.index(env_names[i])
        if field.key in keys[:i]:
            issues.append((f"config[{i}].key", f"duplicate key {field.key!r}"))
        elif first < i:
            name = env_names[i]
            issues.append(
                (
                    f"config[{i}].key",
                    f"{keys[i]!r} and {keys[first]!r} map to the same environment variable {name}",
                )
            )
    return issues


def _metric_issues(stack: Stack) -> Issues:
    issues: Issues = []
    metric_keys = [m.key for m in stack.metrics]
    for i, key in enumerate(metric_keys):
        if not key.strip():
            issues.append((f"metrics[{i}].key", "key must not be empty"))
        elif key in metric_keys[:i]:
            issues.append((f"metrics[{i}].key", f"duplicate metric {key!r}"))
    return issues


def _output_issues(stack: Stack) -> Issues:
    issues: Issues = []
    for i, out in enumerate(stack.default_outputs):
        if not out.artifact.strip():
            issues.append((f"default_outputs[{i}].artifact", "artifact must not be empty"))
        glob = PurePosixPath(out.glob)
        if not out.glob.strip():
            issues.append((f"default_outputs[{i}].glob", "glob must not be empty"))
        elif glob.is_absolute() or ".." in glob.parts:
            issues.append(
                (f"default_outputs[{i}].glob", "glob must be relative to the working directory")
            )
    return issues


def _example_issues(stack: Stack) -> Issues:
    issues: Issues = []
    names = [e.name for e in stack.examples]
    for i, name in enumerate(names):
        if not name.strip():
            issues.append((f"examples[{i}].name", "name must not be empty"))
        elif name in names[:i]:
            issues.append((f"examples[{i}].name", f"duplicate example {name!r}"))
    return issues


def _launch_issues(stack: Stack, launch: StackLaunch) -> Issues:
    """The launch tasks: ids unique, titles, config valid, settings naming config keys."""
    issues: Issues = []
    keys = [f.key for f in stack.config]
    task_ids = [t.id for t in launch.tasks]
    for i, task in enumerate(launch.tasks):
        path = f"launch.tasks[{i}]"
        if not task.id.strip():
            issues.append((f"{path}.id", "id must not be empty"))
        elif task.id in task_ids[:i]:
            issues.append((f"{path}.id", f"duplicate task id {task.id!r}"))
        if not task.title.strip():
            issues.append((f"{path}.title", "title must not be empty"))
        issues.extend(_config_map_issues(stack, f"{path}.config", task.config))
        for j, setting in enumerate(task.settings):
            if setting not in keys:
                issues.append(
                    (f"{path}.settings[{j}]", f"{setting!r} is not a config key of this stack")
                )
        issues.extend(_preset_issues(stack, path, task))
    return issues


def _preset_issues(stack: Stack, path: str, task: LaunchTask) -> Issues:
    issues: Issues = []
    preset_ids = [p.id for p in task.presets]
    for j, preset in enumerate(task.presets):
        ppath = f"{path}.presets[{j}]"
        if not preset.id.strip():
            issues.append((f"{ppath}.id", "id must not be empty"))
        elif preset.id in preset_ids[:j]:
            issues.append((f"{ppath}.id", f"duplicate preset id {preset.id!r}"))
        if not preset.title.strip():
            issues.append((f"{ppath}.title", "title must not be empty"))
        issues.extend(_config_map_issues(stack, f"{ppath}.config", preset.config))
    return issues


def parse_manifest(data: Mapping[str, Any], file: str = "<manifest>") -> Stack:
    """Build a Stack from parsed TOML (or any mapping); raises :class:`ManifestInvalid`."""
    try:
        stack = Stack.model_validate(dict(data), context={SKIP_CHECKS: True})
    except ValidationError as exc:
        raise ManifestInvalid(_shape_errors(file, exc)) from None
    issues = manifest_issues(stack)
    if issues:
        raise ManifestInvalid([ManifestError(file, path, INVALID, msg) for path, msg in issues])
    return stack


def parse_manifest_text(text: str, file: str = "<manifest>") -> Stack:
    """Parse TOML text into a Stack; raises :class:`ManifestInvalid`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestInvalid([ManifestError(file, "", TOML_SYNTAX, str(exc))]) from None
    return parse_manifest(data, file)


def load_manifest(path: Path) -> Stack:
    """Read and parse one manifest file; raises :class:`ManifestInvalid`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestInvalid([ManifestError(str(path), "", UNREADABLE, str(exc))]) from None
    return parse_manifest_text(text, str(path))
