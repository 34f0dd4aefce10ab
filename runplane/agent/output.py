"""A job's output on its way to the agent: bytes of each stream split into lines
(:class:`LineSplitter`), lines batched into :class:`~runplane.agent.execspec.LogLines`
events with everything else kept in order (``docs/executor.md``, Output and log
batching)."""

from __future__ import annotations

import math
from typing import TypeAlias

import trio

from runplane.agent.execspec import Line, LogLines, Metric, Report, ReportFn, Started, Stream

# Log batching: one LogLines event per this many lines, or this long after its first line.
MAX_BATCH_LINES = 256
BATCH_INTERVAL_SEC = 0.05
# Longer lines are split into pieces of at most this many bytes (a system line says so).
MAX_LINE_BYTES = 64 * 1024
# Characters of a command (or setup snippet) its ``running: ...`` system line shows; the
# whole is in the job's spec (``GET /v1/jobs/<id>``).
SHOWN_CHARS = 120

Lines: TypeAlias = list[Line]
Item: TypeAlias = Lines | Metric | Started


def emitter(report: Report) -> ReportFn:
    if isinstance(report, trio.MemorySendChannel):
        return report.send
    return report


async def batch_events(
    recv: trio.MemoryReceiveChannel[Item],
    emit: ReportFn,
    max_lines: int,
    interval: float,
) -> None:
    """Turn the item stream into events: lines batched, everything else in order."""
    pending: Lines = []
    deadline = math.inf

    async def flush() -> None:
        nonlocal pending, deadline
        if pending:
            batch, pending = pending, []
            await emit(LogLines(tuple(batch)))
        deadline = math.inf

    async with recv:
        while True:
            item: Item | None = None
            with trio.move_on_at(deadline) as scope:
                try:
                    item = await recv.receive()
                except trio.EndOfChannel:
                    break
            if scope.cancelled_caught:
                await flush()
                continue
            if isinstance(item, list):
                if not pending:
                    deadline = trio.current_time() + interval
                pending.extend(item)
                while len(pending) >= max_lines:
                    batch, pending = pending[:max_lines], pending[max_lines:]
                    await emit(LogLines(tuple(batch)))
                if not pending:
                    deadline = math.inf
            elif item is not None:
                await flush()
                await emit(item)
    await flush()


# --------------------------------------------------------------------------- output lines


class LineSplitter:
    """Bytes of one stream in, decoded lines out.

    Lines end at ``\\n`` (a trailing ``\\r`` is dropped); bytes are decoded as UTF-8 with
    ``errors="replace"``; a line longer than ``max_bytes`` is split into pieces at UTF-8
    character boundaries, followed by a ``system`` line saying so.
    """

    def __init__(self, stream: Stream, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.stream = stream
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._parts = 0  # pieces of the current line already emitted
        self._emitted = 0  # bytes of the current line already emitted

    def feed(self, data: bytes | bytearray) -> Lines:
        out: Lines = []
        buf = self._buf
        buf += data
        start = 0
        while (nl := buf.find(b"\n", start)) != -1:
            self._end_line(bytes(buf[start:nl]), out)
            start = nl + 1
        del buf[:start]
        while len(buf) > self.max_bytes:
            cut = _utf8_cut(buf, self.max_bytes)
            self._piece(bytes(buf[:cut]), out)
            del buf[:cut]
        return out

    def close(self) -> Lines:
        """Lines still buffered at end of stream (a last line without ``\\n``)."""
        out: Lines = []
        if self._buf or self._parts:
            self._end_line(bytes(self._buf), out)
            self._buf.clear()
        return out

    def _piece(self, raw: bytes, out: Lines) -> None:
        out.append((self.stream, raw.decode("utf-8", errors="replace")))
        self._parts += 1
        self._emitted += len(raw)

    def _end_line(self, raw: bytes, out: Lines) -> None:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        while len(raw) > self.max_bytes:
            cut = _utf8_cut(raw, self.max_bytes)
            self._piece(raw[:cut], out)
            raw = raw[cut:]
        if raw or not self._parts:
            self._piece(raw, out)
        if self._parts > 1:
            out.append(
                (
                    "system",
                    f"{self.stream} line of {self._emitted} bytes was split into "
                    f"{self._parts} lines of at most {self.max_bytes} bytes",
                )
            )
        self._parts = 0
        self._emitted = 0


def _utf8_cut(buf: bytes | bytearray, limit: int) -> int:
    """A cut position <= limit that does not split a UTF-8 sequence (when it can help it)."""
    cut = limit
    while cut > limit - 3 and cut > 0 and (buf[cut] & 0xC0) == 0x80:
        cut -= 1
    return cut if cut > 0 else limit


_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_ESCAPED = {ord(c): c.encode("unicode_escape").decode("ascii") for c in _LINE_BREAKS}


def shown(text: str) -> str:
    """``text`` (a shell-quoted command) for a system line: its first line, cut after
    :data:`SHOWN_CHARS` characters, then how many lines were left out (``… (+41 lines)``);
    other line-break characters in that first line are escaped (a CR as ``\\r``)."""
    first, *rest = text.split("\n")
    line = first.translate(_ESCAPED)
    if len(line) > SHOWN_CHARS:
        line = f"{line[:SHOWN_CHARS]}\u2026"
    elif rest:
        line = f"{line} \u2026"
    return f"{line} (+{len(rest)} lines)" if rest else line
