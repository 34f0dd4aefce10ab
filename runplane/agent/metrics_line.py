"""Parse the ``::metric {json}`` lines a job prints on stdout.

A metric line is ``::metric`` followed by whitespace and one JSON object, e.g.
``::metric {"step": 3, "loss": 0.25}``. ``step`` is optional (a non-negative integer or
``null``); every other key whose value is a finite JSON number (booleans excluded) is a
metric value. Keys with other values (strings, lists, ``NaN``, ...) are ignored, and so are
keys the server would not take as a metric's name (a control character, more than
``NAME_MAX`` characters: docs/agent.md "Checks on what an agent sends"); a line left with no
numeric value at all is malformed.

This module is pure (no I/O, no trio) so the rules can be tested on their own.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass

METRIC_PREFIX = "::metric"

#: The longest metric name the server takes.
NAME_MAX = 256
_NOT_IN_NAME = re.compile("[\x00-\x1f\x7f\ud800-\udfff]")

# How much of a malformed line is quoted back in the system log line that reports it.
QUOTE_LIMIT = 200


class MetricLineError(ValueError):
    """A line that starts like a metric line but is not a valid one; ``str(err)`` says why."""


@dataclass(frozen=True, slots=True)
class ParsedMetric:
    step: int | None
    values: dict[str, float]


def is_metric_line(line: str) -> bool:
    """True for ``::metric`` alone or followed by whitespace (``::metrics`` is a log line)."""
    if not line.startswith(METRIC_PREFIX):
        return False
    rest = line[len(METRIC_PREFIX) :]
    return rest == "" or rest[0].isspace()


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None
    return number if math.isfinite(number) else None


def parse_metric_line(line: str) -> ParsedMetric | None:
    """Return the metric of a ``::metric`` line, or ``None`` if ``line`` is not one.

    Raises :class:`MetricLineError` for a metric line that cannot be used.
    """
    if not is_metric_line(line):
        return None
    payload = line[len(METRIC_PREFIX) :].strip()
    if not payload:
        raise MetricLineError("missing JSON object after ::metric")
    try:
        data = json.loads(payload)
    except json.JSONDecodeError as exc:
        raise MetricLineError(f"invalid JSON: {exc.msg} at column {exc.colno}") from None
    except RecursionError:
        raise MetricLineError("invalid JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise MetricLineError(f"expected a JSON object, got {_json_kind(data)}")

    step = data.pop("step", None)
    if step is not None and (
        isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < 2**63
    ):
        raise MetricLineError(f"step must be a non-negative integer, got {json.dumps(step)}")

    values: dict[str, float] = {}
    ignored: list[str] = []
    for key, value in data.items():
        number = _number(value)
        if number is None or len(key) > NAME_MAX or _NOT_IN_NAME.search(key):
            ignored.append(key)
        else:
            values[key] = number
    if not values:
        detail = f" (ignored non-numeric: {', '.join(ignored)})" if ignored else ""
        raise MetricLineError(f"no numeric values{detail}")
    return ParsedMetric(step=step, values=values)


def _json_kind(value: object) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    return "a number"


def quote(line: str) -> str:
    """The start of ``line`` for an error message, marked when cut."""
    return line if len(line) <= QUOTE_LIMIT else line[:QUOTE_LIMIT] + "..."
