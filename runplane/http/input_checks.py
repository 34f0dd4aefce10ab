"""The edge's checks on hostile input: every request body, path id and query value is
checked here, once, before a route or the store sees it.

A JSON body (:func:`decode_json`) must be UTF-8, nested at most ``MAX_DEPTH`` levels,
its integers within int64 (the widest integer any field or column takes; a field with a
narrower range checks it in its model), its numbers finite (no ``NaN``/``Infinity``,
no ``1e999``), and its strings (keys too) free of NUL and of lone UTF-16 surrogates
(``"\\ud83d"``): PostgreSQL cannot store a NUL in text, and a lone surrogate cannot be
encoded as UTF-8, so either would fail deep in the store or the spec hash. Path
parameters and query names and values (:func:`check_request_text`) must be free of control
characters. Each refusal is a 400 problem naming where: the body path as validation
names it (``limits.seed``, ``command.0``) or the parameter.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from quart import request

from runplane.problems import FieldProblem, Problem

#: Deepest nesting of arrays and objects a body may have (a RunSpec needs about 5).
MAX_DEPTH = 64
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: Longest integer literal that can be in int64 ("-9223372036854775808": 20 characters).
_INT64_CHARS = 20
#: What a body string may not hold: NUL, or a lone surrogate.
_BAD_IN_BODY = re.compile("[\x00\ud800-\udfff]")
#: What a path parameter or query name or value may not hold: control characters.
_BAD_IN_PARAM = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")


class Unfit:
    """A JSON number that no field can take, kept where it was for the walk to name."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


def _parse_int(text: str) -> int | Unfit:
    if len(text) > _INT64_CHARS:  # before int(): no work on a 4,400-digit literal
        return Unfit(f"integer of {len(text.lstrip('-'))} digits is outside int64")
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        return Unfit(f"integer {text} is outside int64 ({INT64_MIN} to {INT64_MAX})")
    return value


def _parse_float(text: str) -> float | Unfit:
    value = float(text)
    if not math.isfinite(value):
        return Unfit(f"number {text[:40]} is not finite")
    return value


def _parse_constant(name: str) -> Unfit:
    return Unfit(f"{name} is not a JSON number")


def _refuse(key: str, code: str, message: str) -> Problem:
    return Problem(400, code, f"{key}: {message}", [FieldProblem(key, code, message)])


def _text_problem(text: str) -> str | None:
    found = _BAD_IN_BODY.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "contains a NUL character (\\u0000), which cannot be stored"
    return f"contains a lone UTF-16 surrogate (\\u{ord(found.group()):04x}), which is not text"


def parse_checked(raw: str | bytes) -> Any:
    """``raw`` parsed as JSON by the edge's number rules: an integer outside int64, a
    number that is not finite, or ``NaN``/``Infinity`` is an :class:`Unfit` where it was,
    for a walk to name (the agents' WebSocket checks its frames so too,
    ``wire_checks.py``). Raises what ``json.loads`` raises, ``RecursionError`` included."""
    if isinstance(raw, str) and not raw.startswith("\ufeff"):
        return _DECODER.decode(raw)  # what json.loads does, without a decoder per call
    return json.loads(
        raw, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
    )


_DECODER = json.JSONDecoder(
    parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
)


def decode_json(raw: str | bytes) -> Any:
    """Parse and check a JSON body; a 400 Problem naming where it is wrong."""
    try:
        data = parse_checked(raw)
    except UnicodeDecodeError:
        raise Problem(400, "malformed_json", "request body is not UTF-8") from None
    except RecursionError:
        raise _too_deep("(body)") from None
    except json.JSONDecodeError as exc:
        raise Problem(
            400,
            "malformed_json",
            f"request body is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}",
        ) from None
    _walk(data)
    return data


def _too_deep(key: str) -> Problem:
    return _refuse(key, "too_deep", f"nested deeper than {MAX_DEPTH} levels of arrays and objects")


def _walk(data: Any) -> None:
    """Check every value of a parsed body (iteratively: no recursion on hostile depth)."""
    stack: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while stack:
        value, path = stack.pop()
        if isinstance(value, dict | list) and len(path) >= MAX_DEPTH:
            raise _too_deep(_key(path))
        if isinstance(value, dict):
            for name, item in value.items():
                problem = _text_problem(name)
                if problem is not None:
                    raise _refuse(_key((*path, printable(name))), "invalid_text", "key " + problem)
                stack.append((item, (*path, name)))
        elif isinstance(value, list):
            stack.extend((item, (*path, str(i))) for i, item in enumerate(value))
        elif isinstance(value, str):
            problem = _text_problem(value)
            if problem is not None:
                raise _refuse(_key(path), "invalid_text", problem)
        elif isinstance(value, Unfit):
            raise _refuse(_key(path), "out_of_range", value.why)


def _key(path: tuple[str, ...]) -> str:
    return ".".join(path) or "(body)"


def printable(text: str) -> str:
    """A refused name as it can be shown: escapes for what is not printable ASCII."""
    return text.encode("unicode_escape").decode("ascii")


def param_problem(value: str) -> str | None:
    """Why a path parameter or query name or value is refused; None when it is fine."""
    found = _BAD_IN_PARAM.search(value)
    if found is None:
        return None
    return f"contains the control character \\u{ord(found.group()):04x}"


async def check_request_text() -> None:
    """``before_request`` hook, the first: a path parameter or a query name or value with a
    control character is a 400 naming it, before auth, routes or the store read it."""
    for name, value in (request.view_args or {}).items():
        if isinstance(value, str) and (problem := param_problem(value)) is not None:
            raise _refuse(name, "invalid_text", f"path parameter {problem}")
    for name, value in request.args.items(multi=True):
        problem = param_problem(name) or param_problem(value)
        if problem is not None:
            raise _refuse(printable(name), "invalid_text", f"query parameter {problem}")
