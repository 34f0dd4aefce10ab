"""SQLite backends: the embedded default (a WAL file) and the memory store.

File store durability: WAL journal with ``synchronous=FULL``, so every COMMIT
fsyncs the WAL before the writer acknowledges the batch. (``NORMAL`` in WAL mode
survives a process crash but may lose the last commits on power loss or an OS
crash; that would break "acknowledged = durable". Group commit pays one fsync
per batch, which is what makes FULL affordable.)

Concurrency: one writer connection (the group-commit thread, ``BEGIN
IMMEDIATE``), plus a small pool of read-only connections used from worker
threads (WAL lets them read while the writer commits), plus one read-only connection
for point reads (``fetchone``) in the event loop thread itself: they take
microseconds, where a hop to a worker thread and back costs ~0.3 ms. ``busy_timeout`` makes a
second process that writes the same file wait instead of failing.

Memory store: a private ``:memory:`` database on ONE connection shared by the
writer and the readers under a lock (in-memory batches are microseconds, and a
single connection avoids shared-cache table locks). Nothing survives close().
"""

from __future__ import annotations

import contextlib
import errno
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

from runplane.persistence.migrate import Migration
from runplane.persistence.store import Dialect, Row, SqlStore

T = TypeVar("T")

BUSY_TIMEOUT_MS = 10_000
#: How long an inline read (in the event loop thread) may wait on a lock before it gives up
#: and the read is retried in a worker thread. WAL readers almost never wait at all.
INLINE_BUSY_MS = 5


def _dict_row(cursor: sqlite3.Cursor, row: tuple[Any, ...]) -> Row:
    return {col[0]: value for col, value in zip(cursor.description, row, strict=True)}


def _connect(target: str, *, uri: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(
        target,
        uri=uri,
        timeout=BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,  # autocommit: transactions are explicit BEGIN/COMMIT
        check_same_thread=False,  # used from the writer thread and worker threads
        cached_statements=256,
    )
    conn.row_factory = _dict_row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


_BLOCK_COMMENT = re.compile(r"/\*.*?\*/", re.S)
_LINE_COMMENT = re.compile(r"--[^\n]*")


def iter_statements(script: str) -> Iterator[str]:
    """Split an SQL script into single statements, by SQLite's own lexer.

    ``sqlite3.complete_statement`` understands quotes, comments and ``CREATE
    TRIGGER ... BEGIN ... END;``, so a ``;`` ends a statement only where SQLite
    says it does.
    """
    start = 0
    pos = script.find(";")
    while pos != -1:
        chunk = script[start : pos + 1]
        if sqlite3.complete_statement(chunk):
            if _has_code(chunk):
                yield chunk.strip()
            start = pos + 1
        pos = script.find(";", pos + 1)
    rest = script[start:]
    if _has_code(rest):
        raise ValueError(f"SQL script ends with an incomplete statement: {rest.strip()[:80]!r}")


def _has_code(text: str) -> bool:
    text = _LINE_COMMENT.sub("", _BLOCK_COMMENT.sub("", text))
    return bool(text.strip().strip(";").strip())


def _enable_wal(conn: sqlite3.Connection, path: Path) -> None:
    """Switch the file to WAL (persistent), waiting out other processes doing the same.

    The switch needs an exclusive lock and SQLite may answer SQLITE_BUSY at once,
    without calling the busy handler, when another connection holds a lock (two
    processes opening a new database together): retry until the busy timeout.
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            row = conn.execute("PRAGMA journal_mode = WAL").fetchone()
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.1)
            continue
        mode = str(next(iter(row.values()))).lower() if row else None
        if mode != "wal":
            raise sqlite3.OperationalError(f"could not switch {path} to WAL (mode {mode!r})")
        return


#: SQLite's error names (``sqlite3.Error.sqlite_errorname``, extended codes included) that
#: say the file cannot be used right now, not that the statement is wrong: locked by
#: another process past the busy timeout, the disk failing, the file gone or read-only.
#: (SQLITE_FULL, a full disk, is not among them: :func:`sqlite_full`.)
UNREACHABLE_ERRORS = (
    "SQLITE_BUSY",
    "SQLITE_LOCKED",
    "SQLITE_IOERR",
    "SQLITE_CANTOPEN",
    "SQLITE_READONLY",
    "SQLITE_PROTOCOL",
)


def sqlite_unreachable(exc: BaseException) -> bool:
    """True for an SQLite error that says the database file cannot be used right now."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    name = getattr(exc, "sqlite_errorname", None) or ""
    return name.startswith(UNREACHABLE_ERRORS)


#: OS errors of a full disk or an exhausted quota
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def sqlite_full(exc: BaseException) -> bool:
    """True for an error that says the database's disk is full: SQLITE_FULL ("database or
    disk is full"), or ENOSPC/EDQUOT from the OS (an I/O error SQLite met writing)."""
    if isinstance(exc, OSError):
        return exc.errno in FULL_ERRNOS
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    name = getattr(exc, "sqlite_errorname", None) or ""
    return name.startswith("SQLITE_FULL") or "database or disk is full" in str(exc)


class _SQLiteBase(Dialect):
    name = "sqlite"
    begin_sql = "BEGIN IMMEDIATE"  # take the write lock up front: no upgrade deadlocks

    def begin_migration(self, conn: sqlite3.Connection) -> None:
        conn.execute("BEGIN IMMEDIATE")  # the database-wide write lock

    def transaction_aborted(self, conn: sqlite3.Connection) -> bool:
        return not conn.in_transaction

    def table_exists(self, conn: sqlite3.Connection, table: str) -> bool:
        row = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)
        ).fetchone()
        return row is not None

    def run_script(self, conn: sqlite3.Connection, script: str) -> None:
        # executescript() would COMMIT first; run statement by statement instead
        for statement in iter_statements(script):
            conn.execute(statement)

    def versions(self, conn: Any) -> dict[str, str]:
        return {"sqlite": sqlite3.sqlite_version}

    def unreachable(self, exc: BaseException) -> bool:
        return sqlite_unreachable(exc)


class SQLiteDialect(_SQLiteBase):
    """A database file in WAL mode; see the module docstring."""

    def __init__(self, path: Path, *, read_connections: int = 4) -> None:
        self.path = path
        self.read_concurrency = read_connections
        self._readers: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all_readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._inline: sqlite3.Connection | None = None

    def connect_writer(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        conn = _connect(str(self.path))
        try:
            _enable_wal(conn, self.path)
            conn.execute("PRAGMA synchronous = FULL")
        except BaseException:
            conn.close()
            raise
        return conn

    def full(self, exc: BaseException) -> str | None:
        if not sqlite_full(exc):
            return None
        return (
            f"the store's disk (RUNPLANE_DATA_DIR={self.path.parent}) is full, so nothing "
            "was written: free space, then retry"
        )

    def open_readers(self, writer_conn: Any) -> None:
        self._readers = queue.SimpleQueue()
        self._all_readers = []
        self._inline = None

    def run_inline_read(self, fn: Callable[[Any], T]) -> tuple[bool, T | None]:
        """Point reads in the event loop thread, on a connection of its own: a WAL reader
        does not wait for the writer, so this is microseconds. If it ever has to wait
        (a checkpoint restart, recovery), it gives up after a few ms and the read goes to
        a worker thread instead of stalling the loop."""
        conn = self._inline
        if conn is None:
            conn = self._inline = self._new_reader()
            conn.execute(f"PRAGMA busy_timeout = {INLINE_BUSY_MS}")
            with self._readers_lock:
                self._all_readers.append(conn)
        try:
            return True, fn(conn)
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise
            return False, None
        finally:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

    def _new_reader(self) -> sqlite3.Connection:
        conn = _connect(str(self.path))
        conn.execute("PRAGMA query_only = ON")
        return conn

    @contextlib.contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        try:
            conn = self._readers.get_nowait()
        except queue.Empty:
            # the store's read limiter caps concurrent reads at read_concurrency,
            # so at most that many connections are ever made
            conn = self._new_reader()
            with self._readers_lock:
                self._all_readers.append(conn)
        try:
            yield conn
        finally:
            if conn.in_transaction:  # a read never should, but never leak a snapshot
                conn.execute("ROLLBACK")
            self._readers.put(conn)

    def close_readers(self) -> None:
        with self._readers_lock:
            readers, self._all_readers = self._all_readers, []
        self._inline = None
        for conn in readers:
            conn.close()
        self._readers = queue.SimpleQueue()


class MemoryDialect(_SQLiteBase):
    """A private in-memory database on one connection; see the module docstring."""

    read_concurrency = 1

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None

    def connect_writer(self) -> sqlite3.Connection:
        if self._conn is not None:
            # a second connection would be a different, empty database
            raise sqlite3.OperationalError("the memory store's connection was lost")
        self._conn = _connect(":memory:")
        return self._conn

    def close_connection(self, conn: Any) -> None:
        with self._lock:
            conn.close()
            self._conn = None

    @contextlib.contextmanager
    def reader(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                raise sqlite3.ProgrammingError("the memory store is closed")
            yield self._conn

    def batch_guard(self) -> threading.Lock:
        return self._lock


class SQLiteStore(SqlStore):
    """Embedded default: one SQLite file (``RUNPLANE_DATA_DIR/runplane.db``)."""

    kind = "sqlite"
    durable = True
    supports_identity = True

    def __init__(
        self,
        path: Path,
        *,
        read_connections: int = 4,
        migrations: Sequence[Migration] | None = None,
        max_batch: int = 512,
    ) -> None:
        self.path = path
        super().__init__(
            SQLiteDialect(path, read_connections=read_connections),
            migrations=migrations,
            max_batch=max_batch,
        )


class MemoryStore(SqlStore):
    """``RUNPLANE_DATABASE_URL=memory``: no database; nothing survives close()."""

    kind = "memory"
    durable = False
    supports_identity = False

    def __init__(
        self, *, migrations: Sequence[Migration] | None = None, max_batch: int = 512
    ) -> None:
        super().__init__(MemoryDialect(), migrations=migrations, max_batch=max_batch)
