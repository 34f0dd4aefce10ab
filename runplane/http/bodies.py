"""Request bodies: strict pydantic models and the one place JSON is parsed.

Unknown fields are a 400 naming the field (typos must not be silently ignored), malformed
JSON is a 400 saying where it broke, and every validation failure lists RunProblem entries.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError
from quart import request

from runplane.problems import FieldProblem, Problem

B = TypeVar("B", bound=BaseModel)

_CODES = {
    "extra_forbidden": "unknown_field",
    "missing": "missing_field",
}


class Body(BaseModel):
    """Base of every request body model: unknown fields are refused."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


def _key(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(body)"


def validation_problem(exc: ValidationError, status: int = 400) -> Problem:
    errors = []
    for err in exc.errors(include_url=False):
        code = _CODES.get(err["type"], "bad_type" if err["type"].endswith("_type") else "invalid")
        key = _key(err["loc"])
        if code == "unknown_field":
            message = f"unknown field {key!r}"
        elif code == "missing_field":
            message = f"field {key!r} is required"
        else:
            message = f"{key}: {err['msg']}"
        errors.append(FieldProblem(key=key, code=code, message=message))
    detail = "; ".join(e.message for e in errors)
    return Problem(status, errors[0].code if len(errors) == 1 else "invalid_body", detail, errors)


async def read_json() -> Any:
    raw = await request.get_data(as_text=False)
    if not raw:
        raise Problem(400, "missing_body", "request body is empty; send a JSON object")
    try:
        return json.loads(raw)
    except UnicodeDecodeError:
        raise Problem(400, "malformed_json", "request body is not UTF-8") from None
    except json.JSONDecodeError as exc:
        raise Problem(
            400,
            "malformed_json",
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from None


async def parse_body(model: type[B]) -> B:
    """Parse the request's JSON body into ``model`` or raise a 400 Problem."""
    data = await read_json()
    if not isinstance(data, dict):
        raise Problem(400, "malformed_json", "request body must be a JSON object")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise validation_problem(exc) from None
