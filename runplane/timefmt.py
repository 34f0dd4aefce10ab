"""Timestamps as the API shows them: ISO 8601 UTC with milliseconds and ``Z``."""

from __future__ import annotations

import time


def iso_ms(ms: int) -> str:
    """Unix milliseconds as ``2026-11-22T10:15:04.123Z``."""
    seconds, millis = divmod(int(ms), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


def iso_ms_or_none(ms: int | None) -> str | None:
    return None if ms is None else iso_ms(ms)
