"""Query-string parsing with problems that name the parameter."""

from __future__ import annotations

from quart import request

from runplane.problems import FieldProblem, Problem


def _bad(name: str, message: str) -> Problem:
    return Problem(
        400, "invalid_query", f"{name}: {message}", [FieldProblem(name, "invalid", message)]
    )


def int_arg(name: str, default: int, *, minimum: int = 0, maximum: int | None = None) -> int:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise _bad(name, f"expected an integer, got {raw!r}") from None
    if value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise _bad(name, f"must be {bound}, got {value}")
    return value


def choice_arg(name: str, choices: tuple[str, ...]) -> str | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    if raw not in choices:
        raise _bad(name, f"unknown value {raw!r}; accepted: {', '.join(choices)}")
    return raw


def str_arg(name: str, *, max_length: int = 256) -> str | None:
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    if len(raw) > max_length:
        raise _bad(name, f"longer than {max_length} characters")
    return raw


def flag_arg(name: str) -> bool:
    return request.args.get(name, "").lower() in ("1", "true", "yes")


def number_arg(name: str, *, minimum: float = 0) -> float | int | None:
    """An optional number (an integer stays an integer)."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    try:
        value: float | int = int(raw)
    except ValueError:
        try:
            value = float(raw)
        except ValueError:
            raise _bad(name, f"expected a number, got {raw!r}") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise _bad(name, f"expected a finite number, got {raw!r}")
    if value < minimum:
        raise _bad(name, f"must be >= {minimum:g}, got {raw}")
    return value
