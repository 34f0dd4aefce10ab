"""The rules body validators enforce beyond their fields' types, as JSON Schema: merged
into the request models' generated schemas (``components/schemas``), so the document
refuses what the server refuses (docs/api.md "OpenAPI").

Each entry names the model (its component name), the JSON Schema keywords added to it
and, in a comment, the validator it restates; ``tests/http/test_openapi_contract.py``
checks the server refuses a body breaking each rule and takes one keeping it.

The edge's checks on every JSON body (runplane/http/input_checks.py) are written into
every request schema too (:func:`with_edge_checks`): a string (and an object's key) holds
no NUL, an integer is within int64.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from runplane.auth.roles import ROLE_NAMES, SCOPES

_NULL = {"type": "null"}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: A body string: no NUL (PostgreSQL cannot store one; input_checks.py refuses it).
NO_NUL = "^[^\\u0000]*$"
REF_PREFIX = "#/components/schemas/"


def _exactly_one(first: str, second: str) -> dict[str, Any]:
    """Exactly one of two optional fields is sent (not null): the other absent or null."""
    return {
        "oneOf": [
            {"required": [first], "properties": {first: {"not": _NULL}, second: _NULL}},
            {"required": [second], "properties": {second: {"not": _NULL}, first: _NULL}},
        ]
    }


#: component name -> keywords added to its schema.
RULES: Mapping[str, Mapping[str, Any]] = {
    # runplane/jobs/arrays.py BatchBody._one_shape: `jobs`, or `job` with a non-empty `sweep`
    "BatchBody": {
        "oneOf": [
            {
                "required": ["jobs"],
                "properties": {"jobs": {"not": _NULL}, "job": _NULL, "sweep": _NULL},
            },
            {
                "required": ["job", "sweep"],
                "properties": {
                    "jobs": _NULL,
                    "job": {"not": _NULL},
                    # not null, so an object (the field's own schema): no ``type`` here, or
                    # a client generator takes the branch for a second model of the field
                    "sweep": {"not": _NULL, "minProperties": 1},
                },
            },
        ]
    },
    # runplane/services/schedules.py _timing, _spec: one of cron/every, one of job/pipeline
    "ScheduleBody": {"allOf": [_exactly_one("cron", "every"), _exactly_one("job", "pipeline")]},
    # runplane/pipelines (dag.check): a stage has a name (unique: checked with the topology)
    "PipelineStageBody": {
        "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 128}},
    },
    # runplane/sessions/body.py check_pod: a service has a name (unique, likewise)
    "PodService": {
        "required": ["name"],
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 64}},
    },
    # runplane/http/routes/auth.py mint_token: a known role or known scopes, not both
    "MintBody": {
        "properties": {
            "role": {"anyOf": [{"enum": list(ROLE_NAMES)}, _NULL]},
            "scopes": {"anyOf": [{"type": "array", "items": {"enum": list(SCOPES)}}, _NULL]},
        },
        "not": {
            "required": ["role", "scopes"],
            "properties": {"role": {"not": _NULL}, "scopes": {"not": _NULL}},
        },
    },
    # runplane/nodes/grants.py: the grantee org is required (the owner defaults to the caller's)
    # and `expires_at` is what pydantic's datetime takes: an RFC 3339 time or a unix time
    "GrantBody": {
        "required": ["grantee_org"],
        "properties": {
            "grantee_org": {"type": "string", "minLength": 1},
            "expires_at": {
                "anyOf": [{"type": "string", "format": "date-time"}, {"type": "number"}, _NULL]
            },
        },
    },
}


def _merge(schema: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(schema)
    for key, value in extra.items():
        if key == "required":
            merged["required"] = sorted({*merged.get("required", ()), *value})
        elif key == "properties":
            # a property's schema is replaced whole (its default may not hold any more)
            merged.setdefault("properties", {}).update(copy.deepcopy(dict(value)))
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def with_rules(components: Mapping[str, Any]) -> dict[str, Any]:
    """``components`` with each :data:`RULES` entry merged into its model's schema."""
    out = dict(components)
    for name, extra in RULES.items():
        if name in out:
            out[name] = _merge(out[name], extra)
    return out


def _request_names(components: Mapping[str, Any], roots: list[str]) -> set[str]:
    """The components a request body reaches (its own and those its ``$ref``s name)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in seen or name not in components:
            continue
        seen.add(name)
        todo += [ref.removeprefix(REF_PREFIX) for ref in _refs(components[name])]
    return seen


def _refs(schema: Any) -> list[str]:
    found: list[str] = []
    stack = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str):
                found.append(ref)
            stack += list(item.values())
        elif isinstance(item, list):
            stack += item
    return found


def _limit(schema: dict[str, Any]) -> None:
    """Write the edge's checks into one schema and everything nested in it, in place."""
    stack: list[Any] = [schema]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack += item
            continue
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "string" and not {"pattern", "enum", "const", "format"} & set(item):
            item["pattern"] = NO_NUL
        elif kind == "integer":
            item["minimum"] = max(item.get("minimum", INT64_MIN), INT64_MIN)
            item["maximum"] = min(item.get("maximum", INT64_MAX), INT64_MAX)
        elif kind == "object" and item.get("additionalProperties", True) is not False:
            item.setdefault("propertyNames", {"pattern": NO_NUL})
        stack += [v for k, v in item.items() if k not in ("default", "examples", "const")]


def with_edge_checks(components: Mapping[str, Any], roots: list[str]) -> dict[str, Any]:
    """``components`` with the edge's body checks written into every schema the request
    bodies named by ``roots`` (component names) reach."""
    out = dict(components)
    for name in _request_names(components, roots):
        out[name] = copy.deepcopy(out[name])
        _limit(out[name])
    return out
