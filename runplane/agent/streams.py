"""Realtime streams of a job, the agent's side (``docs/streams.md``).

Every attempt gets a *streams directory*, ``<workdir>.streams`` (beside the workdir, so
output globs never upload it; ``/streams`` inside the sandbox). A job publishes stream
``<name>`` by appending lines to ``<dir>/<name>``: :func:`forward_streams` follows every
such file and hands each line to the agent as a chunk of a
:class:`~runplane.agent.protocol.JobStream`. Teleop frames from the server go the other
way: :func:`append_teleop` appends each as one line to ``<dir>/<name>.teleop``.

Transport-free: the agent passes an ``emit`` callback. Change notification is inotify
(``inotify_simple``) where there is one, else polling every :data:`POLL_SEC`; reading the
files into lines is :mod:`runplane.agent.stream_files`.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import stat
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeAlias

import trio

from runplane.agent.isolation import JobUser
from runplane.agent.protocol import TELEOP_SUFFIX, JobStream, StreamChunkIn, Teleop
from runplane.agent.stream_files import MAX_CHUNK_BYTES, DirEvents, DirWatch, Reading, StreamFiles

#: The job's environment variable naming its streams directory.
STREAMS_ENV = "RUNPLANE_STREAMS_DIR"
#: One ``job_stream`` message holds at most this many chunks and this much data.
MAX_MESSAGE_CHUNKS = 512
MAX_MESSAGE_BYTES = 512 * 1024
#: Without inotify the directory is looked at this often.
POLL_SEC = 0.02
#: After the stop, at most this many more rounds are read (a process that left the job
#: and keeps writing cannot hold it up).
FINAL_ROUNDS = 64

log = logging.getLogger("runplane.agent")

Emit: TypeAlias = Callable[[JobStream], Awaitable[None]]
Note: TypeAlias = Callable[[str], Awaitable[None]]


# --------------------------------------------------------------------------- the directory


def streams_dir_of(workdir: Path) -> Path:
    """The streams directory of the attempt whose workdir is ``workdir``."""
    return workdir.with_name(f"{workdir.name}.streams")


def make_streams_dir(workdir: Path, user: JobUser | None = None) -> Path:
    """Create a fresh streams directory for ``workdir`` (0700; ``user``'s when given, so the
    job may create files there) and return its absolute path (blocking). A leftover of the
    same attempt is removed first, as :func:`~runplane.agent.isolation.make_workdir` does."""
    path = streams_dir_of(workdir).absolute()
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    path.mkdir(mode=0o700)
    if user is not None:
        os.chown(path, user.uid, user.gid)
    return path


# --------------------------------------------------------------------------- teleop


def teleop_line(msg: Teleop) -> bytes:
    """The line a teleop frame becomes: ``{"seq": %d, "ts": %d, "frame": %s}`` + newline.
    ``frame`` is compact JSON text already and is inserted as it is (a line break in it,
    only possible as whitespace between JSON tokens, becomes a space: one frame, one line)."""
    frame = msg.frame.replace("\r", " ").replace("\n", " ")
    return f'{{"seq": {msg.seq:d}, "ts": {msg.ts:d}, "frame": {frame}}}\n'.encode()


def append_teleop(directory: Path, msg: Teleop, *, user: JobUser | None = None) -> None:
    """Append ``msg`` as one line to ``<directory>/<stream>.teleop`` (blocking, one write).

    The file is created 0600 (given to ``user`` when there is one, so the job can read
    it). The job owns the directory, so what is there is not trusted: no symlink is
    followed, and an existing file must be a regular file of the job's user with one link.
    Raises OSError."""
    path = directory / f"{msg.stream}{TELEOP_SUFFIX}"
    line = teleop_line(msg)
    fd = _open_teleop(path, user)
    try:
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"short write to {path.name} ({written} of {len(line)} bytes)")
    finally:
        os.close(fd)


def _open_teleop(path: Path, user: JobUser | None) -> int:
    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
    for _ in range(3):
        try:
            fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass
        else:
            try:
                if user is not None:
                    os.fchown(fd, user.uid, user.gid)
            except BaseException:
                os.close(fd)
                raise
            return fd
        try:
            fd = os.open(path, flags)
        except FileNotFoundError:
            continue  # removed meanwhile: create it
        st = os.fstat(fd)
        owner = user.uid if user is not None else os.geteuid()
        if not stat.S_ISREG(st.st_mode) or st.st_uid != owner or st.st_nlink != 1:
            os.close(fd)
            raise OSError(f"{path.name} is not a regular file of the job")
        return fd
    raise OSError(f"{path.name} keeps disappearing")


# --------------------------------------------------------------------------- chunks


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def chunk_of(line: bytes, ts: int) -> StreamChunkIn:
    """One line as a chunk: ``{"encoding": "base64", "data": "<str>"}`` (exactly those
    keys) is ``base64`` with that data; other JSON is ``json`` (the line as it is); anything
    else is ``text`` (UTF-8, undecodable bytes replaced)."""
    try:
        text = line.decode("utf-8")
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):  # (UnicodeDecodeError is a ValueError)
        return StreamChunkIn(data=line.decode("utf-8", errors="replace"), encoding="text", ts=ts)
    if (
        isinstance(value, dict)
        and value.keys() == {"encoding", "data"}
        and value["encoding"] == "base64"
        and isinstance(value["data"], str)
    ):
        return StreamChunkIn(data=value["data"], encoding="base64", ts=ts)
    return StreamChunkIn(data=text, encoding="json", ts=ts)


def messages_of(
    job_id: str, attempt: int, stream: str, chunks: list[StreamChunkIn]
) -> Iterator[JobStream]:
    """``chunks`` as ``job_stream`` messages of at most :data:`MAX_MESSAGE_CHUNKS` chunks
    and :data:`MAX_MESSAGE_BYTES` of data each (a single bigger chunk goes alone)."""
    part: list[StreamChunkIn] = []
    size = 0
    for chunk in chunks:
        n = len(chunk.data)
        if part and (len(part) >= MAX_MESSAGE_CHUNKS or size + n > MAX_MESSAGE_BYTES):
            yield JobStream(job_id=job_id, attempt=attempt, stream=stream, chunks=part)
            part, size = [], 0
        part.append(chunk)
        size += n
    if part:
        yield JobStream(job_id=job_id, attempt=attempt, stream=stream, chunks=part)


def dropped_line_note(stream: str, size: int) -> str:
    return (
        f"stream {stream}: dropped a line of {size} bytes (a stream chunk is at most "
        f"{MAX_CHUNK_BYTES} bytes; write bigger payloads to a file)"
    )


async def forward_streams(
    directory: Path,
    emit: Emit,
    *,
    job_id: str,
    attempt: int,
    stop: trio.Event,
    note: Note | None = None,
    owner: int | None = None,
    poll_sec: float = POLL_SEC,
    inotify: bool = True,
) -> None:
    """Follow the stream files of ``directory`` and ``emit`` their lines until ``stop``.

    Every file whose name is a stream name (:data:`STREAM_NAME_PATTERN`: not the
    ``.teleop`` files) is read from its start; each complete line becomes one chunk
    (:func:`chunk_of`, ``ts`` the unix ms when read). Whatever one wake-up found goes out at
    once as one ``job_stream`` per stream (split beyond :data:`MAX_MESSAGE_CHUNKS` chunks or
    :data:`MAX_MESSAGE_BYTES`). A line over :data:`MAX_CHUNK_BYTES` is not sent: ``note``
    gets a sentence saying so. Once ``stop`` is set, what is left is read and sent (at most
    :data:`FINAL_ROUNDS` more rounds), a last line without its newline included, and this
    returns. ``owner``: follow only files of this uid (the job user's). Waits with inotify
    (``inotify=False``, or none here: polls every ``poll_sec``); reads inline (small reads
    of regular files)."""
    try:
        streams = StreamFiles(directory, owner)
    except OSError as exc:
        if note is not None:
            await note(f"streams not forwarded: cannot open {directory}: {exc.strerror or exc}")
        return
    watch = DirWatch.open(directory) if inotify else None
    send = partial(_send, emit=emit, note=note, job_id=job_id, attempt=attempt)
    try:
        events: DirEvents | None = None  # None: look at everything
        left = FINAL_ROUNDS
        while True:
            stopping = stop.is_set()
            if stopping:
                events = None
                left -= 1
            reading = streams.look(
                events.created if events is not None else None,
                events.written if events is not None else None,
                final=stopping and left <= 0,
            )
            await send(reading)
            if stopping and (left <= 0 or not reading.more):
                if left > 0:  # the last lines without a newline
                    await send(streams.look(None, None, final=True))
                return
            watch, events = await _next_round(watch, stop, poll_sec=poll_sec, more=reading.more)
    finally:
        if watch is not None:
            watch.close()
        streams.close()


async def _next_round(
    watch: DirWatch | None, stop: trio.Event, *, poll_sec: float, more: bool
) -> tuple[DirWatch | None, DirEvents | None]:
    """Wait for the next round of reading: none when the last one left ``more``, else the
    directory's events (inotify) or ``poll_sec`` without a watch, or ``stop``. Returns the
    watch to go on with (None once the directory is gone: nothing more will come, so poll)
    and the events to look at (None: everything)."""
    if more:
        await trio.lowlevel.checkpoint()
        return watch, None
    if watch is None:
        with trio.move_on_after(poll_sec):
            await stop.wait()
        return None, None
    await _wait_readable_or(watch.fileno(), stop)
    events = watch.events()
    if events.gone:
        watch.close()
        return None, None
    return watch, None if events.overflow else events


async def _wait_readable_or(fd: int, stop: trio.Event) -> None:
    async with trio.open_nursery() as nursery:

        async def readable() -> None:
            await trio.lowlevel.wait_readable(fd)
            nursery.cancel_scope.cancel()

        async def stopped() -> None:
            await stop.wait()
            nursery.cancel_scope.cancel()

        nursery.start_soon(readable)
        nursery.start_soon(stopped)


async def _send(
    reading: Reading, *, emit: Emit, note: Note | None, job_id: str, attempt: int
) -> None:
    ts = int(time.time() * 1000)
    for stream, lines in reading.lines.items():
        if lines:
            chunks = [chunk_of(line, ts) for line in lines]
            for msg in messages_of(job_id, attempt, stream, chunks):
                await emit(msg)
    if note is not None:
        for text in reading.notes:
            await note(text)
        for stream, size in reading.dropped:
            await note(dropped_line_note(stream, size))


@asynccontextmanager
async def forwarding(
    directory: Path | None,
    emit: Emit,
    *,
    job_id: str,
    attempt: int,
    note: Note | None = None,
    owner: int | None = None,
) -> AsyncIterator[None]:
    """Forward the streams of ``directory`` during the body of the ``async with`` (the
    job's processes), then stop and wait for the last lines. A failure of the forwarding
    is logged and noted, never raised into the job. ``directory`` None: nothing."""
    if directory is None:
        yield
        return
    stop = trio.Event()

    async def forward() -> None:
        try:
            await forward_streams(
                directory, emit, job_id=job_id, attempt=attempt, stop=stop, note=note, owner=owner
            )
        except Exception as exc:
            log.exception("stream forwarding failed", extra={"job_id": job_id, "attempt": attempt})
            if note is not None:
                await note(f"streams no longer forwarded: {exc}")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(forward)
        try:
            yield
        finally:
            stop.set()
