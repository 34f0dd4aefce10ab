"""The stream files of a job's streams directory, read (``runplane/agent/streams.py``
forwards what they hold; ``docs/streams.md``).

:class:`StreamFiles` follows every file of the directory named like a stream (a regular
file of the job's user, opened without following symlinks) and reads what was appended
since the last look as complete lines (:class:`LineBuffer`: a line is up to its ``\n``, a
``\r`` before it dropped; a line over :data:`MAX_CHUNK_BYTES` is dropped and its size
reported). :class:`DirWatch` says which files changed (inotify, ``inotify_simple``; closed
off the event loop, see :meth:`DirWatch.close`).
Every call is blocking but small: reads of regular files, at most
:data:`MAX_READ_PER_ROUND` of a stream a look.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from runplane.agent.protocol import STREAM_NAME_PATTERN

#: One line is one chunk; a longer line is not sent (a system line says so).
MAX_CHUNK_BYTES = 256 * 1024
#: At most this much of one stream is read per look (the rest at the next, right after).
MAX_READ_PER_ROUND = 1024 * 1024
#: A job publishes at most this many streams (each one an open file of the agent).
MAX_STREAMS = 64
#: Files not followed are noted in the job's log this many times, then once more in all.
MAX_REFUSAL_NOTES = 10
_READ_SIZE = 64 * 1024

_NAME = re.compile(STREAM_NAME_PATTERN)


def is_stream_name(name: str) -> bool:
    """Whether a file of the streams directory is a stream (``<name>.teleop`` is not)."""
    return _NAME.fullmatch(name) is not None


# --------------------------------------------------------------------------- one stream file


@dataclass(slots=True)
class LineBuffer:
    """Bytes of one stream in, complete lines out (``\\r`` before ``\\n`` dropped); a line
    over :data:`MAX_CHUNK_BYTES` is dropped and its size reported instead."""

    buf: bytearray = field(default_factory=bytearray)
    skipping: int = 0  # > 0: bytes of an overlong line dropped so far

    def feed(self, data: bytes, lines: list[bytes], dropped: list[int]) -> None:
        start = 0
        while (nl := data.find(b"\n", start)) != -1:
            piece = data[start:nl]
            start = nl + 1
            if self.skipping:
                dropped.append(self.skipping + len(piece))
                self.skipping = 0
                continue
            self._line(bytes(self.buf) + piece, lines, dropped)
            self.buf.clear()
        rest = data[start:]
        if self.skipping:
            self.skipping += len(rest)
            return
        self.buf += rest
        if len(self.buf) > MAX_CHUNK_BYTES + 1:  # (+ 1: a "\r" that is not counted)
            self.skipping = len(self.buf)
            self.buf.clear()

    def close(self, lines: list[bytes], dropped: list[int]) -> None:
        """The end: a last line without its newline counts too."""
        if self.skipping:
            dropped.append(self.skipping)
        elif self.buf:
            self._line(bytes(self.buf), lines, dropped)
        self.reset()

    def reset(self) -> None:
        self.buf.clear()
        self.skipping = 0

    @staticmethod
    def _line(line: bytes, lines: list[bytes], dropped: list[int]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > MAX_CHUNK_BYTES:
            dropped.append(len(line))
        else:
            lines.append(line)


@dataclass(slots=True)
class _Follower:
    """One stream file, read from where the last read stopped."""

    name: str
    fd: int
    inode: tuple[int, int]
    offset: int = 0
    lines: LineBuffer = field(default_factory=LineBuffer)

    def read(self, out: list[bytes], dropped: list[int]) -> bool:
        """Read what was appended (up to :data:`MAX_READ_PER_ROUND`); True when more is
        left. A file cut shorter (truncated) is read again from its start."""
        budget = MAX_READ_PER_ROUND
        while budget > 0:
            data = os.pread(self.fd, min(_READ_SIZE, budget), self.offset)
            if not data:
                if os.fstat(self.fd).st_size < self.offset:
                    self.offset = 0
                    self.lines.reset()
                    continue
                return False
            self.offset += len(data)
            budget -= len(data)
            self.lines.feed(data, out, dropped)
        return True


# --------------------------------------------------------------------------- the directory


class DirWatch:
    """The directory's change events (``inotify_simple``); ``None`` from :meth:`open`
    where there is no inotify (not Linux, or out of inotify instances)."""

    def __init__(self, ino: Any) -> None:
        self._ino = ino

    @classmethod
    def open(cls, directory: Path) -> DirWatch | None:
        try:
            from inotify_simple import INotify, flags
        except ImportError:
            return None
        try:
            ino = INotify()
        except (OSError, AttributeError):  # AttributeError: no inotify_init1 in the libc
            return None
        try:
            ino.add_watch(
                directory, flags.CREATE | flags.MODIFY | flags.CLOSE_WRITE | flags.MOVED_TO
            )
        except OSError:
            ino.close()
            return None
        return cls(ino)

    def fileno(self) -> int:
        fd: int = self._ino.fileno()
        return fd

    def events(self) -> DirEvents:
        """What happened since the last call (never blocks)."""
        from inotify_simple import flags

        out = DirEvents(set(), set())
        for event in self._ino.read(timeout=0):
            mask = int(event.mask)
            if mask & flags.Q_OVERFLOW:
                out.overflow = True
            if mask & flags.IGNORED:
                out.gone = True
            name = str(event.name)
            if name and mask & (flags.CREATE | flags.MOVED_TO):
                out.created.add(name)
            if name and mask & (flags.MODIFY | flags.CLOSE_WRITE):
                out.written.add(name)
        return out

    def close(self) -> None:
        """Close the watch without waiting for it. Closing an inotify instance blocks for
        the kernel's grace period (``synchronize_srcu``: 5-10 ms, more on a busy machine);
        on the event loop that stalled every task of the agent (and of the server, for the
        in-process agent) once per job. Trio forgets the descriptor here; a worker thread
        closes it (docs/benchmarks.md "local_lifecycle")."""
        trio.lowlevel.notify_closing(self.fileno())
        trio.lowlevel.start_thread_soon(self._ino.close, _ignore)


def _ignore(result: object) -> None:
    """A closed watch's outcome: nothing waits for it (a close does not fail usefully)."""


@dataclass(slots=True)
class DirEvents:
    """What :meth:`DirWatch.events` saw."""

    created: set[str]  # names created or moved in
    written: set[str]  # names written to
    overflow: bool = False  # events were lost: look at everything
    gone: bool = False  # the watch ended (the directory was removed)


@dataclass(slots=True)
class Reading:
    """What one look at the directory found: lines per stream, dropped lines, more left."""

    lines: dict[str, list[bytes]] = field(default_factory=dict)
    dropped: list[tuple[str, int]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    more: bool = False


class StreamFiles:
    """The stream files of one directory being followed (blocking calls, all small)."""

    def __init__(self, directory: Path, owner: int | None) -> None:
        self.directory = directory
        self.owner = owner
        self.dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.followers: dict[str, _Follower] = {}
        #: files named like a stream that are not followed (not a regular file of the job)
        self.refused: dict[str, tuple[int, int]] = {}
        self.refusals = 0

    def close(self) -> None:
        for follower in self.followers.values():
            os.close(follower.fd)
        self.followers.clear()
        os.close(self.dir_fd)

    def look(
        self, created: Iterable[str] | None, written: Iterable[str] | None, final: bool = False
    ) -> Reading:
        """Follow new files (``created``; None: list the directory) and read the followed
        ones that changed (``written``; None: all). ``final``: the end, so the last lines
        without a newline count too."""
        reading = Reading()
        to_read = set(self.followers) if written is None else set(written)
        for name in self._names() if created is None else created:
            if self._follow(name, reading):
                to_read.add(name)
        for name in sorted(to_read):
            follower = self.followers.get(name)
            if follower is not None:
                self._read(follower, reading, final)
        return reading

    def _names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.dir_fd))
        except OSError:
            return []

    def _follow(self, name: str, reading: Reading) -> bool:
        """Start following ``name`` (again, when it is another file now); True if it is."""
        if not is_stream_name(name):
            return False
        try:
            st = os.stat(name, dir_fd=self.dir_fd, follow_symlinks=False)
        except OSError:
            return name in self.followers  # gone: what is open is still read
        ident = (st.st_dev, st.st_ino)
        old = self.followers.get(name)
        if old is not None:
            if old.inode == ident:
                return True
            self._read(old, reading, final=True)  # replaced: the rest of the old file first
            self._drop(old)
        elif self.refused.get(name) == ident:
            return False
        if not stat.S_ISREG(st.st_mode):
            return self._refuse(name, ident, reading)
        if len(self.followers) >= MAX_STREAMS:
            return self._refuse(
                name, ident, reading, f"a job publishes at most {MAX_STREAMS} streams"
            )
        try:
            fd = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.dir_fd
            )
        except OSError as exc:
            return self._refuse(name, ident, reading, exc.strerror or str(exc))
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (self.owner is not None and st.st_uid != self.owner):
            os.close(fd)
            return self._refuse(name, ident, reading)
        self.followers[name] = _Follower(name, fd, (st.st_dev, st.st_ino))
        return True

    def _refuse(
        self,
        name: str,
        ident: tuple[int, int],
        reading: Reading,
        why: str = "not a regular file of the job",
    ) -> bool:
        self.refused[name] = ident
        self.refusals += 1
        if self.refusals <= MAX_REFUSAL_NOTES:
            reading.notes.append(f"stream {name}: not followed ({why})")
        elif self.refusals == MAX_REFUSAL_NOTES + 1:
            reading.notes.append("more stream files not followed: no more notes of them")
        return False

    def _read(self, follower: _Follower, reading: Reading, final: bool) -> None:
        lines = reading.lines.setdefault(follower.name, [])
        dropped: list[int] = []
        try:
            if follower.read(lines, dropped):
                reading.more = True
        except OSError as exc:
            reading.notes.append(
                f"stream {follower.name}: stopped following it ({exc.strerror or exc})"
            )
            self.refused[follower.name] = follower.inode
            self._drop(follower)
            final = True
        if final:
            follower.lines.close(lines, dropped)
        reading.dropped.extend((follower.name, n) for n in dropped)

    def _drop(self, follower: _Follower) -> None:
        if self.followers.get(follower.name) is follower:
            del self.followers[follower.name]
        os.close(follower.fd)
