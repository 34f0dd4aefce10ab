"""Request bodies: strict pydantic models and the one place JSON is parsed.

Unknown fields are a 400 naming the field and the fields accepted at that place, with the
close one when there is one (typos must not be silently ignored); a value of another JSON
type than its field's is a 400 ``bad_type`` (validation is strict: nothing is converted,
``true`` is not ``1`` and ``"7"`` is not ``7``); malformed or hostile JSON
is a 400 saying where it broke (``input_checks.py``), and every validation failure lists
RunProblem entries.
"""

from __future__ import annotations

import json
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError
from quart import request

from runplane.problems import FieldProblem, Problem
from runplane.suggest import accepted_phrase

from .input_checks import decode_json

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


def _options(annotation: Any) -> list[Any]:
    """The types an annotation admits: ``Annotated`` unwrapped, a union flattened, no None."""
    if get_origin(annotation) is Annotated:
        return _options(get_args(annotation)[0])
    if get_origin(annotation) in (Union, types.UnionType):
        return [t for arg in get_args(annotation) for t in _options(arg)]
    return [] if annotation is None or annotation is type(None) else [annotation]


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _wire_name(name: str, info: Any) -> str:
    """The name a body uses for a field: its alias when it has one."""
    alias = info.validation_alias if isinstance(info.validation_alias, str) else info.alias
    return alias or name


def _step(annotation: Any, part: Any) -> Any:
    """The annotation found at ``part`` (a field name, list index or dict key) inside
    ``annotation``; None when it cannot be told."""
    for option in _options(annotation):
        if _is_model(option) and isinstance(part, str):
            for name, info in option.model_fields.items():
                if part in (name, _wire_name(name, info)):
                    return info.annotation
        origin, args = get_origin(option), get_args(option)
        if origin is None or not isinstance(origin, type):
            continue
        if isinstance(part, int) and issubclass(origin, Sequence) and args:
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                return args[part] if 0 <= part < len(args) else None
            return args[0]
        if isinstance(part, str) and issubclass(origin, Mapping) and len(args) == 2:
            return args[1]
    return None


def accepted_fields(model: type[BaseModel], parent: tuple[Any, ...]) -> list[str] | None:
    """The fields a body may send at ``parent`` (a pydantic ``loc`` without its last part)
    of ``model``, in declaration order and by alias; None when no single model is there."""
    annotation: Any = model
    for part in parent:
        annotation = _step(annotation, part)
        if annotation is None:
            return None
    models = [option for option in _options(annotation) if _is_model(option)]
    if len(models) != 1:
        return None
    return [_wire_name(name, info) for name, info in models[0].model_fields.items()]


def _unknown_field(model: type[BaseModel] | None, loc: tuple[Any, ...], key: str) -> str:
    accepted = accepted_fields(model, loc[:-1]) if model is not None and loc else None
    if accepted is None:
        return f"unknown field {key!r}"
    return f"unknown field {key!r}; {accepted_phrase(accepted, str(loc[-1]))}"


def validation_problem(
    exc: ValidationError, status: int = 400, model: type[BaseModel] | None = None
) -> Problem:
    """The 400 of a failed validation. With ``model`` (the model that was validated) an
    unknown field also lists the fields accepted where it was sent."""
    errors = []
    for err in exc.errors(include_url=False):
        code = _CODES.get(err["type"], "bad_type" if err["type"].endswith("_type") else "invalid")
        key = _key(err["loc"])
        if code == "unknown_field":
            message = _unknown_field(model, tuple(err["loc"]), key)
        elif code == "missing_field":
            message = f"field {key!r} is required"
        else:
            message = f"{key}: {err['msg']}"
        errors.append(FieldProblem(key=key, code=code, message=message))
    detail = "; ".join(e.message for e in errors)
    return Problem(status, errors[0].code if len(errors) == 1 else "invalid_body", detail, errors)


def validate_body(model: type[B], data: Mapping[str, Any]) -> B:
    """``data`` (a decoded JSON object) as ``model``, strictly: each field takes the JSON
    type it declares and nothing converted to it (an integer refuses ``true``, ``1.5`` and
    ``"7"``; a number refuses ``true`` and takes an integer; a boolean refuses ``0``, ``1``
    and ``"true"``), validated in pydantic's JSON mode, where a string is still a date-time,
    an enum or a tuple's item where the field says so. A 400 naming each field otherwise
    (``bad_type`` for a value of the wrong JSON type)."""
    try:
        return model.model_validate_json(json.dumps(data), strict=True)
    except ValidationError as exc:
        raise validation_problem(exc, model=model) from None


async def parse_body(
    model: type[B], fast: Callable[[Mapping[str, Any]], B | None] | None = None
) -> B:
    """Parse the request's JSON body into ``model`` (:func:`body_of`) or raise a 400
    Problem."""
    return body_of(await request.get_data(as_text=False), model, fast)


def body_of(
    raw: str | bytes, model: type[B], fast: Callable[[Mapping[str, Any]], B | None] | None = None
) -> B:
    """``raw`` (a request's body) as ``model`` (:func:`validate_body`, strict) or a 400
    Problem: Quart's routes and the lean lanes (docs/lean-lanes.md) parse alike. The JSON
    is checked by :func:`runplane.http.input_checks.decode_json` (depth, int64 range,
    finite numbers, no NUL or lone surrogate in a string) first. ``fast``:
    a cheaper validation of the same model for the bodies it knows (a job array's items,
    validated once per distinct item), None for any other body or any fault, which is then
    validated (and answered) as ever."""
    if not raw:
        raise Problem(400, "missing_body", "request body is empty; send a JSON object")
    data = decode_json(raw)
    if not isinstance(data, dict):
        raise Problem(400, "malformed_json", "request body must be a JSON object")
    return (fast(data) if fast is not None else None) or validate_body(model, data)
