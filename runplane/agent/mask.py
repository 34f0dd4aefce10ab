"""Masking org secret values in what a job reports (docs/secrets.md): every occurrence of
a value the run order listed (``RunSpec.mask``, longest first) becomes ``***`` in the job's
log lines and stream chunks before they leave the node, as GitHub Actions masks secrets."""

from __future__ import annotations

from collections.abc import Sequence

from runplane.agent.outbox import Queued
from runplane.agent.protocol import JobLogs, JobStream

MASK = "***"


def masked_text(text: str, values: Sequence[str]) -> str:
    for value in values:
        if value in text:
            text = text.replace(value, MASK)
    return text


def masked(msg: Queued, values: Sequence[str]) -> Queued:
    """``msg`` with the values masked (the same object when nothing changed)."""
    if not values:
        return msg
    if isinstance(msg, JobLogs):
        lines = [(line[0], masked_text(line[1], values), *line[2:]) for line in msg.lines]
        return msg.model_copy(update={"lines": lines})
    if isinstance(msg, JobStream):
        chunks = [c.model_copy(update={"data": masked_text(c.data, values)}) for c in msg.chunks]
        return msg.model_copy(update={"chunks": chunks})
    return msg
