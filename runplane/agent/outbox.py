"""The node agent's outbox: job reports waiting to be sent, and finishes waiting for an ack.

:class:`Outbox` is pure bookkeeping (no I/O): per job attempt (:data:`JobKey`) a bounded
queue of ``job_phase``/``job_logs``/``job_metric``/``job_stream``/``job_finished``/
``job_released`` messages, dropping the oldest lines, points and chunks beyond the limits
with a note (:func:`dropped_note`), splitting big log batches into frames, keeping each
``job_finished`` until acknowledged. Answers that need no ack go out first."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias, cast

from runplane.agent.jobref import JobKey, job_key
from runplane.agent.protocol import (
    JobFinished,
    JobLogs,
    JobMetric,
    JobPhase,
    JobReleased,
    JobStream,
    TeleopAck,
    UpdateStatus,
)

#: Per job, reports waiting to be sent are bounded: beyond this many log lines + metric
#: points + stream chunks, or this many bytes of log text and stream data, the oldest are
#: dropped (and a system line says so).
MAX_BUFFERED_UNITS = 10_000
MAX_BUFFERED_BYTES = 8 * 1024 * 1024
#: One ``job_logs`` frame carries at most this much log text (bigger batches are split).
MAX_FRAME_TEXT = 512 * 1024
#: At most this many answers (``teleop_ack``) wait to be sent; beyond, the oldest go.
MAX_CONTROL = 1_000
#: How long a sent log or metric report is kept, to be resent after a reconnect when the
#: server did not store it (it was killed first). A live server stores a report within
#: milliseconds; the window also covers an HA leader paused past its lease. Per job, the
#: kept reports are bounded like the queue (``max_units``, ``max_bytes``).
RESEND_WINDOW_SEC = 60.0

Queued: TypeAlias = JobPhase | JobLogs | JobMetric | JobStream | JobFinished | JobReleased
#: An answer or notice that needs no ack (sent first; dropped on a disconnect).
Control: TypeAlias = TeleopAck | UpdateStatus
#: What the sender sends: a job's report, or an answer that needs no ack.
Outgoing: TypeAlias = Queued | Control


@dataclass(slots=True)
class _Entry:
    seq: int
    msg: Queued
    lines: int = 0  # droppable log lines
    nbytes: int = 0
    metric: bool = False
    chunks: int = 0  # droppable stream chunks

    @property
    def droppable(self) -> bool:
        return bool(self.lines or self.metric or self.chunks)


@dataclass(slots=True)
class _Queue:
    entries: deque[_Entry] = field(default_factory=deque)
    lines: int = 0
    metrics: int = 0
    chunks: int = 0
    nbytes: int = 0
    dropped_lines: int = 0
    dropped_metrics: int = 0
    dropped_chunks: int = 0

    @property
    def units(self) -> int:
        return self.lines + self.metrics + self.chunks

    @property
    def dropped(self) -> bool:
        return bool(self.dropped_lines or self.dropped_metrics or self.dropped_chunks)

    def add(self, entry: _Entry) -> None:
        self.entries.append(entry)
        self._count(entry, 1)

    def insert(self, index: int, entry: _Entry) -> None:
        self.entries.insert(index, entry)
        self._count(entry, 1)

    def remove_at(self, index: int) -> _Entry:
        entry = self.entries[index]
        del self.entries[index]
        self._count(entry, -1)
        return entry

    def _count(self, entry: _Entry, sign: int) -> None:
        self.lines += sign * entry.lines
        self.nbytes += sign * entry.nbytes
        self.metrics += sign * int(entry.metric)
        self.chunks += sign * entry.chunks


@dataclass(slots=True)
class _Unacked:
    msg: JobFinished
    sent_at: float | None = None  # None: waiting in the queue (or in flight), not sent yet


@dataclass(slots=True)
class _Kept:
    """A job attempt's numbered reports: the next number, and the ones sent lately (kept
    for a resend), oldest first."""

    next_n: int = 1
    sent: deque[tuple[float, JobLogs | JobMetric, int, int]] = field(default_factory=deque)
    units: int = 0
    nbytes: int = 0
    #: the highest number no longer kept (too old, or beyond the bounds)
    forgotten: int = 0


@dataclass(slots=True)
class _Inflight:
    key: JobKey
    entry: _Entry | None  # None: an answer from the control queue
    messages: list[Outgoing]


def _split_lines(lines: Sequence[tuple[Any, ...]], limit: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    size = 0
    for line in lines:
        n = len(line[1])
        if chunk and size + n > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append(line)
        size += n
    if chunk:
        yield chunk


def dropped_note(lines: int, metrics: int, chunks: int = 0) -> str:
    counts = ((lines, "log line"), (metrics, "metric point"), (chunks, "stream chunk"))
    what = [f"{n} {word}{'s' * (n != 1)}" for n, word in counts if n]
    return (
        f"agent dropped {' and '.join(what)} of this job: too much output buffered "
        "while disconnected from the server"
    )


class Outbox:
    """Reports waiting to be sent, per job in order, and finishes waiting for an ack.

    Pure bookkeeping, no I/O: the agent's sender takes :meth:`head`, sends it, calls
    :meth:`sent`. A job's queue holds at most ``max_units`` log lines + metric points +
    stream chunks and ``max_bytes`` of log text and stream data; beyond that the oldest are
    dropped and the next report of that job sent is preceded by a ``system`` line saying
    how many. Phases and finishes are never dropped. Jobs are interleaved in the order
    their reports were made. Answers (:meth:`put_control`) go before any of them.
    """

    def __init__(
        self,
        max_units: int | None = None,
        max_bytes: int | None = None,
        frame_text: int | None = None,
    ) -> None:
        self.max_units = MAX_BUFFERED_UNITS if max_units is None else max_units
        self.max_bytes = MAX_BUFFERED_BYTES if max_bytes is None else max_bytes
        self.frame_text = MAX_FRAME_TEXT if frame_text is None else frame_text
        self._queues: dict[JobKey, _Queue] = {}
        self._unacked: dict[JobKey, _Unacked] = {}
        self._control: deque[Control] = deque(maxlen=MAX_CONTROL)
        self._inflight: _Inflight | None = None
        #: number log and metric reports (the server of this session said ``resume``)
        self.numbering = False
        self._kept: dict[JobKey, _Kept] = {}
        self._seq = 0
        self.dropped_lines = 0
        self.dropped_metrics = 0
        self.dropped_chunks = 0

    # -- adding

    def _entry(self, msg: Queued, **kw: Any) -> _Entry:
        self._seq += 1
        return _Entry(self._seq, msg, **kw)

    def put(self, msg: Queued) -> None:
        key = job_key(msg)
        queue = self._queues.setdefault(key, _Queue())
        if isinstance(msg, JobLogs):
            if not msg.lines:
                return
            chunks = list(_split_lines(msg.lines, self.frame_text))
            for chunk in chunks:
                part = msg if len(chunks) == 1 else msg.model_copy(update={"lines": chunk})
                queue.add(self._entry(part, **_sizes(part)))
            self._trim(queue)
        elif isinstance(msg, JobMetric | JobStream):
            queue.add(self._entry(msg, **_sizes(msg)))
            self._trim(queue)
        else:
            if isinstance(msg, JobFinished):
                self._unacked[key] = _Unacked(msg)
            queue.add(self._entry(msg))

    def put_control(self, msg: Control) -> None:
        """An answer that needs no ack: sent before the jobs' reports; while disconnected
        (:meth:`clear_control`) it is dropped."""
        self._control.append(msg)

    def clear_control(self) -> int:
        """Forget the answers not sent yet (the connection they answer is gone); how many."""
        count = len(self._control)
        self._control.clear()
        return count

    def _trim(self, queue: _Queue) -> None:
        while queue.units > self.max_units or queue.nbytes > self.max_bytes:
            index = next((i for i, e in enumerate(queue.entries) if e.droppable), None)
            if index is None:
                return
            entry = queue.entries[index]
            if entry.metric:
                queue.remove_at(index)
                queue.dropped_metrics += 1
                self.dropped_metrics += 1
                continue
            if isinstance(entry.msg, JobStream):
                self._trim_items(queue, index, entry, entry.msg.chunks, "chunks")
            else:
                assert isinstance(entry.msg, JobLogs)
                self._trim_items(queue, index, entry, entry.msg.lines, "lines")

    def _trim_items(
        self,
        queue: _Queue,
        index: int,
        entry: _Entry,
        items: Sequence[Any],
        kind: Literal["lines", "chunks"],
    ) -> None:
        """Drop the oldest ``items`` (log lines or stream chunks) of ``entry`` until the
        queue is within its bounds (or the entry is gone)."""
        n = freed = 0
        while n < len(items) and (
            queue.units - n > self.max_units or queue.nbytes - freed > self.max_bytes
        ):
            freed += _size(items[n])
            n += 1
        queue.remove_at(index)
        if n < len(items):
            rest = _Entry(
                entry.seq,
                entry.msg.model_copy(update={kind: items[n:]}),
                lines=len(items) - n if kind == "lines" else 0,
                nbytes=entry.nbytes - freed,
                chunks=len(items) - n if kind == "chunks" else 0,
            )
            queue.insert(index, rest)
        if kind == "chunks":
            queue.dropped_chunks += n
            self.dropped_chunks += n
        else:
            queue.dropped_lines += n
            self.dropped_lines += n

    # -- sending

    def head(self) -> tuple[JobKey, list[Outgoing]] | None:
        """The next message(s) to send: an answer, else the oldest report (with a drop note
        before it).

        The same messages are returned until :meth:`sent` (a send cut by a lost connection
        is retried first on the next one).
        """
        if self._inflight is not None:
            if not self.numbering:  # numbered for a server that was, not for this one
                self._inflight.messages = [_unnumbered(m) for m in self._inflight.messages]
            return self._inflight.key, self._inflight.messages
        if self._control:
            ack = self._control.popleft()
            key = job_key(ack) if isinstance(ack, TeleopAck) else ("", 0)
            self._inflight = _Inflight(key, None, [ack])
            return self._inflight.key, self._inflight.messages
        best: tuple[int, JobKey] | None = None
        for key, queue in self._queues.items():
            if queue.entries and (best is None or queue.entries[0].seq < best[0]):
                best = (queue.entries[0].seq, key)
        if best is None:
            return None
        key = best[1]
        queue = self._queues[key]
        entry = queue.remove_at(0)
        messages: list[Outgoing] = []
        if not isinstance(entry.msg, JobPhase) and queue.dropped:
            note = dropped_note(queue.dropped_lines, queue.dropped_metrics, queue.dropped_chunks)
            messages.append(JobLogs(job_id=key[0], attempt=key[1], lines=[("system", note)]))
            queue.dropped_lines = queue.dropped_metrics = queue.dropped_chunks = 0
        messages.append(entry.msg)
        if self.numbering:
            messages = [self._number(key, m) for m in messages]
        self._inflight = _Inflight(key, entry, messages)
        return key, messages

    def _number(self, key: JobKey, msg: Outgoing) -> Outgoing:
        if not isinstance(msg, JobLogs | JobMetric) or msg.n is not None:
            return msg
        kept = self._kept.setdefault(key, _Kept())
        kept.next_n += 1
        return msg.model_copy(update={"n": kept.next_n - 1})

    def sent(self, now: float) -> None:
        """The messages of the last :meth:`head` went out."""
        inflight, self._inflight = self._inflight, None
        if inflight is None or inflight.entry is None:
            return
        self._keep(inflight.key, inflight.messages, now)
        if isinstance(inflight.entry.msg, JobReleased):
            self._kept.pop(inflight.key, None)  # handed back: never resumed on this node
        if isinstance(inflight.entry.msg, JobFinished):
            unacked = self._unacked.get(inflight.key)
            if unacked is not None:
                unacked.sent_at = now
        queue = self._queues.get(inflight.key)
        if queue is not None and not queue.entries:
            del self._queues[inflight.key]

    def _keep(self, key: JobKey, messages: Sequence[Outgoing], now: float) -> None:
        """Keep the numbered reports just sent; forget the ones past the window or bounds."""
        kept = self._kept.get(key)
        if kept is None:
            return
        for msg in messages:
            if isinstance(msg, JobLogs | JobMetric) and msg.n is not None:
                units, nbytes = _units(msg)
                kept.sent.append((now, msg, units, nbytes))
                kept.units += units
                kept.nbytes += nbytes
        while kept.sent and (
            kept.sent[0][0] < now - RESEND_WINDOW_SEC
            or kept.units > self.max_units
            or kept.nbytes > self.max_bytes
        ):
            _, old, units, nbytes = kept.sent.popleft()
            kept.units -= units
            kept.nbytes -= nbytes
            kept.forgotten = old.n or kept.forgotten

    def resume(self, marks: Mapping[JobKey, int]) -> int:
        """A new session's server stored each attempt's numbered reports up to
        ``marks[key]``: queue the kept ones after that again, first and in order (before
        whatever was in flight when the last session ended), and forget the kept reports of
        the attempts the server did not list (not its current ones: it refuses their
        reports). How many kept reports are resent. Numbers only go up on the wire, since
        the server drops a number at or below the last one it stored; an attempt's numbers
        go on from where they were, so they are forgotten only with the attempt (its finish
        acknowledged, or handed back)."""
        count = 0
        for key, kept in self._kept.items():
            mark = marks.get(key)
            again: list[Queued] = [
                m for _, m, _, _ in kept.sent if mark is not None and (m.n or 0) > mark
            ]
            count += len(again)
            kept.sent.clear()
            kept.units = kept.nbytes = 0
            if mark is None:
                kept.forgotten = 0
                continue
            if kept.forgotten > mark:
                lost = kept.forgotten - mark
                note = (
                    f"agent could not resend {lost} report{'s' * (lost != 1)} the server "
                    f"had not stored (no longer kept: sent over {RESEND_WINDOW_SEC:.0f} s "
                    "before, or beyond the buffer)"
                )
                again.append(JobLogs(job_id=key[0], attempt=key[1], lines=[("system", note)]))
                kept.forgotten = 0
            inflight = self._inflight
            if again and inflight is not None and inflight.key == key and inflight.entry:
                self._inflight = None  # not known to have gone out: after the resent ones
                again.extend(cast(list[Queued], inflight.messages))  # a report's (has an entry)
            queue = self._queues.setdefault(key, _Queue())
            for i, msg in enumerate(again):
                queue.insert(i, self._entry(msg, **_sizes(msg)))
        return count

    # -- acknowledgements

    def ack(self, key: JobKey) -> bool:
        """The server has the finish of ``key``: forget it (and any copy waiting to be resent)."""
        if self._unacked.pop(key, None) is None:
            return False
        self._kept.pop(key, None)
        queue = self._queues.get(key)
        if queue is not None:
            for i in reversed(range(len(queue.entries))):
                if isinstance(queue.entries[i].msg, JobFinished):
                    queue.remove_at(i)
            if not queue.entries:
                del self._queues[key]
        inflight = self._inflight
        if (
            inflight is not None
            and inflight.key == key
            and inflight.entry is not None
            and isinstance(inflight.entry.msg, JobFinished)
        ):
            self._inflight = None
        return True

    def drop_released(self) -> int:
        """Forget the ``job_released`` messages not sent yet (for a server that does not
        know them); how many."""
        dropped = 0
        for key, queue in list(self._queues.items()):
            for i in reversed(range(len(queue.entries))):
                if isinstance(queue.entries[i].msg, JobReleased):
                    queue.remove_at(i)
                    dropped += 1
            if not queue.entries:
                del self._queues[key]
        inflight = self._inflight
        if (
            inflight is not None
            and inflight.entry is not None
            and isinstance(inflight.entry.msg, JobReleased)
        ):
            self._inflight = None
            dropped += 1
        return dropped

    def requeue_unacked(self, sent_before: float | None = None) -> int:
        """Queue again the finishes sent but not acked (only those sent before ``sent_before``)."""
        count = 0
        for key, unacked in self._unacked.items():
            if unacked.sent_at is None:
                continue
            if sent_before is not None and unacked.sent_at > sent_before:
                continue
            unacked.sent_at = None
            self._queues.setdefault(key, _Queue()).add(self._entry(unacked.msg))
            count += 1
        return count

    # -- looking

    def units(self, key: JobKey) -> int:
        queue = self._queues.get(key)
        return queue.units if queue is not None else 0

    def is_unacked(self, key: JobKey) -> bool:
        return key in self._unacked

    def unacked(self) -> list[JobKey]:
        return list(self._unacked)

    def pending(self) -> int:
        """Messages waiting to be sent (drop notes not counted)."""
        queued = sum(len(q.entries) for q in self._queues.values())
        return queued + len(self._control) + (self._inflight is not None)

    def empty(self) -> bool:
        return self.pending() == 0


def _units(msg: JobLogs | JobMetric) -> tuple[int, int]:
    """Log lines or metric points, and bytes of log text, of a report."""
    if isinstance(msg, JobMetric):
        return 1, 0
    return len(msg.lines), sum(len(line[1]) for line in msg.lines)


def _sizes(msg: Queued) -> dict[str, Any]:
    """The droppable units of a report queued again (``_Entry``'s counts)."""
    if isinstance(msg, JobMetric):
        return {"metric": True}
    if isinstance(msg, JobLogs):
        lines, nbytes = _units(msg)
        return {"lines": lines, "nbytes": nbytes}
    if isinstance(msg, JobStream):
        return {"chunks": len(msg.chunks), "nbytes": sum(len(c.data) for c in msg.chunks)}
    return {}


def _unnumbered(msg: Outgoing) -> Outgoing:
    if isinstance(msg, JobLogs | JobMetric) and msg.n is not None:
        return msg.model_copy(update={"n": None})
    return msg


def _size(item: Any) -> int:
    """The text size of a log line (``(stream, text)``) or a stream chunk."""
    return len(item[1]) if isinstance(item, tuple) else len(item.data)
