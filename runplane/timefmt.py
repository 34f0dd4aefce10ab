"""Timestamps as the API shows them: ISO 8601 UTC with milliseconds and ``Z``."""

from __future__ import annotations

import re
import time

from runplane.problems import FieldProblem, Problem


def iso_ms(ms: int) -> str:
    """Unix milliseconds as ``2026-11-22T10:15:04.123Z``."""
    seconds, millis = divmod(int(ms), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def iso_ms_or_none(ms: int | None) -> str | None:
    return None if ms is None else iso_ms(ms)


_DURATION = re.compile(r"^([1-9][0-9]{0,6})(m|h|d)$")
_UNIT_MS = {"m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(text: str) -> int:
    """``15m``, ``24h``, ``7d`` (minutes, hours, days) -> milliseconds; ValueError else."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ValueError(f"{text[:40]!r} is not a duration such as 15m, 24h or 7d")
    return int(match.group(1)) * _UNIT_MS[match.group(2)]


def window_ms(text: str, *, max_ms: int, most: str) -> int:
    """A ``window`` query value (``duration_ms``) of at most ``max_ms`` (``most`` says it):
    milliseconds, or a 400 naming ``window``."""
    try:
        ms = duration_ms(text)
    except ValueError as exc:
        message = f"window {exc}"
    else:
        if ms <= max_ms:
            return ms
        message = f"window {text} is longer than {most}"
    raise Problem(400, "invalid_query", message, [FieldProblem("window", "invalid", message)])
