"""Structured logging: one JSON object per line on stderr.

Call sites use the stdlib logger with ``extra={...}``; every extra key becomes a field of
the line, so ``log.info("request", extra={"status": 200})`` prints
``{"ts": "...", "level": "info", "logger": "runplane.http", "msg": "request", "status": 200}``.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any, TextIO

from runplane.timefmt import iso_ms

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(
    vars(logging.LogRecord("x", logging.INFO, "x", 0, "x", None, None)).keys()
    | {"message", "asctime", "taskName"}
)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": iso_ms(int(record.created * 1000)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, separators=(",", ":"))


def configure(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Route the ``runplane`` and ``hypercorn`` loggers to JSON lines on ``stream``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Our middleware writes the one line per request; hypercorn's access log would be a second.
    logging.getLogger("hypercorn.access").disabled = True
