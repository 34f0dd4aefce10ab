"""Server-sent events read off an httpx response: ``id``, ``event`` and ``data`` fields
per the HTML standard's event-stream format (comments and ``retry`` ignored)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Event:
    event: str
    data: str
    id: str | None


def parse(lines: Iterable[str]) -> Iterator[Event]:
    """Events from the stream's lines (without their line endings)."""
    name, ident = "message", None
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield Event(name, "\n".join(data), ident)
            name, data = "message", []
            continue
        if line.startswith(":"):
            continue  # a comment: the server's keepalive
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            name = value
        elif field == "data":
            data.append(value)
        elif field == "id":
            ident = value
    if data:
        yield Event(name, "\n".join(data), ident)
