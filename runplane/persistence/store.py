"""The store interface every backend implements, and the shared SQL store.

One interface, three backends (SQLite, PostgreSQL, memory). Trio code talks to
a :class:`Store`; the backends differ only by a small :class:`Dialect` object
(how to connect, how to start a write transaction, how to translate ``?``
placeholders, where reads run). Everything else lives here once:

* reads (``fetchone`` / ``fetchall``) run on worker threads through a capacity
  limiter sized to the backend's read connections;
* writes (``execute`` / ``execute_many`` / ``transaction``) go to a single
  :class:`~runplane.persistence.writer.GroupCommitWriter` thread that commits
  whatever is pending in one transaction, one SAVEPOINT per write.

SQL is written once, portable between SQLite and PostgreSQL: ``?`` placeholders,
TEXT ids, JSON as TEXT, BIGINT unix milliseconds, ``ON CONFLICT ... DO
UPDATE/NOTHING``. See docs/persistence.md.
"""

from __future__ import annotations

import json
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Protocol, Self, TypeVar

import outcome
import trio

from runplane.histogram import Histogram
from runplane.persistence.errors import (
    StoreClosedError,
    StoreFullError,
    StoreFullWriteError,
    StoreUnavailableError,
    StoreUnavailableWriteError,
    TransactionAbortedError,
    WriteBatchError,
)
from runplane.persistence.migrate import Migration, apply_migrations, load_migrations
from runplane.persistence.writer import GroupCommitWriter, Statement, WriterStatistics

StoreKind = Literal["sqlite", "postgres", "memory"]
Params = Sequence[Any]
Row = dict[str, Any]
T = TypeVar("T")

__all__ = [
    "Dialect",
    "Params",
    "Row",
    "SqlStore",
    "Store",
    "StoreClosedError",
    "StoreFullError",
    "StoreKind",
    "StoreStatistics",
    "StoreUnavailableError",
    "TransactionAbortedError",
    "Tx",
    "WriteBatchError",
    "from_json",
    "is_integrity_error",
    "now_ms",
    "to_json",
]


# ---------------------------------------------------------------------------
# small helpers for portable SQL


def now_ms() -> int:
    """Wall-clock unix time in milliseconds, the portable timestamp (BIGINT)."""
    return time.time_ns() // 1_000_000


def to_json(value: Any) -> str:
    """Serialize ``value`` for a JSON TEXT column (compact, stable key order)."""
    return json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)


def from_json(text: str | None) -> Any:
    """Parse a JSON TEXT column; ``None`` (SQL NULL) stays ``None``."""
    return None if text is None else json.loads(text)


def is_integrity_error(exc: BaseException) -> bool:
    """True for a constraint violation (unique, foreign key, not null, check).

    Works for both drivers without importing psycopg when it is not in use, so
    callers can turn a duplicate insert into a 409 on any backend.
    """
    import sqlite3

    if isinstance(exc, sqlite3.IntegrityError):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(exc, psycopg.IntegrityError)


# ---------------------------------------------------------------------------
# the interface


class Tx(Protocol):
    """The handle a :meth:`Store.transaction` function gets (synchronous)."""

    def execute(self, sql: str, params: Params = ()) -> int: ...

    def execute_many(self, sql: str, seq_of_params: Iterable[Params]) -> int: ...

    def fetchone(self, sql: str, params: Params = ()) -> Row | None: ...

    def fetchall(self, sql: str, params: Params = ()) -> list[Row]: ...


@dataclass(frozen=True, slots=True)
class StoreStatistics:
    """Counters of the group-commit writer (like trio's ``.statistics()``)."""

    batches_committed: int
    writes_committed: int
    largest_batch: int
    pending: int
    writes_failed: int
    batches_failed: int
    #: BEGIN-to-COMMIT seconds of committed batches (None: a store without a writer)
    commit_seconds: Histogram | None = None


class Store(ABC):
    """Async persistence interface used from trio code.

    * ``kind``: ``"sqlite" | "postgres" | "memory"``.
    * ``durable``: an acknowledged write survives a crash and a restart.
    * ``supports_identity``: identity routes (users, tokens, audit) are served;
      False for the memory backend, where the spec says they answer 404.
    """

    kind: StoreKind
    durable: bool
    supports_identity: bool

    @abstractmethod
    async def open(self) -> None:
        """Connect and apply pending migrations."""

    @abstractmethod
    async def close(self) -> None:
        """Commit every pending write, then close all connections."""

    @abstractmethod
    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        """First row of a query as a dict, or None."""

    @abstractmethod
    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        """All rows of a query as dicts."""

    @abstractmethod
    async def execute(self, sql: str, params: Params = ()) -> int:
        """Run one write statement; committed when this returns. Returns the rowcount."""

    @abstractmethod
    async def execute_many(self, sql: str, seq_of_params: Iterable[Params]) -> int:
        """Run one statement for each parameter tuple, all in the same commit.

        Returns the summed rowcount.
        """

    @abstractmethod
    async def transaction(self, fn: Callable[[Tx], T]) -> T:
        """Run ``fn(tx)`` on the writer thread inside one transaction.

        ``fn`` is a plain synchronous function (no awaits, keep it short: it
        holds the writer). Its return value is returned once committed; an
        exception rolls back everything it did and is re-raised here.
        """

    @abstractmethod
    def statistics(self) -> StoreStatistics:
        """Group-commit counters and the pending queue depth."""

    def versions(self) -> dict[str, str]:
        """Driver / server versions, for diagnostics and benchmarks."""
        return {}

    async def ping(self) -> None:
        """Answer a trivial read and an empty write transaction (the readiness probe):
        returns once both did, raises :class:`StoreUnavailableError` when the store
        cannot be reached. (Fenced under ``RUNPLANE_HA=1``: the write's commit checks the
        epoch, so a replica that no longer leads gets :class:`WriteBatchError`.)"""
        await self.fetchone("SELECT 1 AS ok")
        await self.transaction(lambda tx: tx.fetchone("SELECT 1 AS ok"))

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


# ---------------------------------------------------------------------------
# the shared implementation


class Dialect(ABC):
    """What differs between SQL backends; everything else is shared.

    All methods are synchronous and run on worker threads or the writer thread.
    """

    name: str
    #: statement starting a write transaction on the writer connection
    begin_sql: str = "BEGIN"
    #: how many reads may run at once (sizes the read limiter)
    read_concurrency: int = 4
    #: True if :meth:`run_statements` can send many statements in one round trip
    pipelined: bool = False

    def sql(self, query: str) -> str:
        """Translate portable SQL (``?`` placeholders) to the driver's paramstyle."""
        return query

    @abstractmethod
    def connect_writer(self) -> Any:
        """A new connection for the writer thread, in autocommit mode.

        Transactions are driven explicitly (``begin_sql`` / ``COMMIT``).
        """

    def writer_usable(self, conn: Any) -> bool:
        """False when the writer connection is broken and must be replaced."""
        return True

    def close_connection(self, conn: Any) -> None:
        conn.close()

    def run_statements(
        self, conn: Any, statements: Sequence[tuple[str, tuple[Any, ...]]]
    ) -> list[outcome.Outcome[int]]:
        """Run a run of plain statements of a batch, each able to fail alone.

        Only called when ``pipelined`` is True (to save round trips). Returns one
        outcome (rowcount or the statement's exception) per statement, with the
        effects of every failed statement rolled back and the transaction usable;
        raises if the transaction as a whole is lost.
        """
        raise NotImplementedError

    def commit(self, conn: Any) -> None:
        """COMMIT the writer's open transaction (PostgreSQL with HA first checks the
        fencing epoch in the same round trip: ``PostgresDialect.commit``)."""
        conn.execute("COMMIT")

    @abstractmethod
    def transaction_aborted(self, conn: Any) -> bool:
        """True if the writer's transaction is no longer open and usable.

        Checked locally (no round trip) after each write and before COMMIT.
        """

    @abstractmethod
    def begin_migration(self, conn: Any) -> None:
        """Start a transaction holding the cross-process migration lock."""

    @abstractmethod
    def table_exists(self, conn: Any, table: str) -> bool: ...

    @abstractmethod
    def run_script(self, conn: Any, script: str) -> None:
        """Run a migration script (several statements) inside the open transaction."""

    def open_readers(self, writer_conn: Any) -> None:  # noqa: B027 - optional hook
        """Set up read connections (called after migrations)."""

    def close_readers(self) -> None:  # noqa: B027 - optional hook
        """Close read connections."""

    @abstractmethod
    def reader(self) -> AbstractContextManager[Any]:
        """A connection to run one read on (from a pool)."""

    def run_inline_read(self, fn: Callable[[Any], T]) -> tuple[bool, T | None]:
        """Run a short read ``fn(conn)`` in the calling (event loop) thread, if this backend
        can do that without blocking it: ``(True, result)``; ``(False, None)`` when it
        cannot (the default) or cannot right now, and the read goes to a worker thread."""
        return False, None

    def run_read(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(conn)`` on a read connection (worker thread)."""
        with self.reader() as conn:
            return fn(conn)

    def batch_guard(self) -> AbstractContextManager[object] | None:
        """Held around each writer batch, if the backend needs it (memory)."""
        return None

    def versions(self, conn: Any) -> dict[str, str]:
        return {}

    def unreachable(self, exc: BaseException) -> bool:
        """True when the driver's ``exc`` says the database cannot be reached right now
        (connection refused or lost, no connection in time, file locked or disk
        failing), not that the statement is wrong: the store then raises
        :class:`StoreUnavailableError` in its place."""
        return False

    def full(self, exc: BaseException) -> str | None:
        """What is full, when the driver's ``exc`` says the store's disk is full (SQLite's
        SQLITE_FULL or ENOSPC, PostgreSQL's ``disk_full``): the detail of the
        :class:`StoreFullError` the store raises in its place; None for any other error."""
        return None


def _unavailable(kind: str, cause: BaseException) -> str:
    return f"the {kind} store cannot be reached: {cause}"


def _rows(cursor: Any) -> list[Row]:
    return list(cursor.fetchall()) if cursor.description is not None else []


class _ConnTx:
    """:class:`Tx` over one connection (the writer's, inside its transaction)."""

    __slots__ = ("_conn", "_dialect")

    def __init__(self, conn: Any, dialect: Dialect) -> None:
        self._conn = conn
        self._dialect = dialect

    def execute(self, sql: str, params: Params = ()) -> int:
        cur = self._conn.execute(self._dialect.sql(sql), tuple(params))
        return int(cur.rowcount)

    def execute_many(self, sql: str, seq_of_params: Iterable[Params]) -> int:
        cur = self._conn.cursor()
        try:
            cur.executemany(self._dialect.sql(sql), [tuple(p) for p in seq_of_params])
            return max(int(cur.rowcount), 0)
        finally:
            cur.close()

    def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        cur = self._conn.execute(self._dialect.sql(sql), tuple(params))
        row = cur.fetchone() if cur.description is not None else None
        return row

    def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return _rows(self._conn.execute(self._dialect.sql(sql), tuple(params)))


class SqlStore(Store):
    """A :class:`Store` over a DB-API connection, parametrized by a :class:`Dialect`."""

    def __init__(
        self,
        dialect: Dialect,
        *,
        migrations: Sequence[Migration] | None = None,
        max_batch: int = 512,
    ) -> None:
        self._dialect = dialect
        self._migrations = migrations
        self._max_batch = max_batch
        self._writer: GroupCommitWriter | None = None
        self._read_limiter = trio.CapacityLimiter(dialect.read_concurrency)
        self._versions: dict[str, str] = {}
        self._closed_stats = WriterStatistics()
        self.applied_migrations: list[int] = []

    # -- lifecycle ---------------------------------------------------------

    async def open(self) -> None:
        if self._writer is not None:
            raise RuntimeError("store is already open")
        token = trio.lowlevel.current_trio_token()
        migrations = (
            list(self._migrations)
            if self._migrations is not None
            else load_migrations(dialect=self._dialect.name)
        )
        conn = await trio.to_thread.run_sync(self._open_sync, migrations)
        self._writer = GroupCommitWriter(
            conn, self._dialect, token, max_batch=self._max_batch, name=f"runplane-{self.kind}"
        )
        self._writer.start()

    def _open_sync(self, migrations: list[Migration]) -> Any:
        dialect = self._dialect
        conn = dialect.connect_writer()
        try:
            self.applied_migrations = apply_migrations(conn, dialect, migrations)
            dialect.open_readers(conn)
            self._versions = dialect.versions(conn)
        except BaseException:
            dialect.close_readers()
            dialect.close_connection(conn)
            raise
        return conn

    async def close(self) -> None:
        writer, self._writer = self._writer, None
        if writer is None:
            return
        try:
            # drains every pending write, then closes the writer connection
            await trio.to_thread.run_sync(writer.stop_and_join)
        finally:
            self._closed_stats = writer.stats
            await trio.to_thread.run_sync(self._dialect.close_readers)

    def _outage(self, exc: Exception) -> StoreUnavailableError | StoreFullError | None:
        """``exc`` as a :class:`StoreFullError` when the driver's error (or a failed
        batch's cause) says the store's disk is full, as a :class:`StoreUnavailableError`
        when it says the database cannot be reached (the dialect says which); None for
        every other error, which the caller re-raises as it is."""
        if isinstance(exc, StoreUnavailableError | StoreFullError):
            return None
        cause = exc.cause if isinstance(exc, WriteBatchError) else exc
        full = self._dialect.full(cause)
        if full is not None:
            if isinstance(exc, WriteBatchError):
                return StoreFullWriteError(full, cause)
            error = StoreFullError(full)
            error.__cause__ = cause
            return error
        if isinstance(exc, WriteBatchError):
            if not self._dialect.unreachable(exc.cause):
                return None
            return StoreUnavailableWriteError(_unavailable(self.kind, exc.cause), exc.cause)
        if not self._dialect.unreachable(exc):
            return None
        outage = StoreUnavailableError(_unavailable(self.kind, exc))
        outage.__cause__ = exc
        return outage

    def _live_writer(self) -> GroupCommitWriter:
        if self._writer is None:
            raise StoreClosedError(f"{self.kind} store is not open")
        return self._writer

    # -- reads -------------------------------------------------------------

    async def _read(self, fn: Callable[[_ConnTx], T]) -> T:
        self._live_writer()
        dialect = self._dialect

        def run() -> T:
            return dialect.run_read(lambda conn: fn(_ConnTx(conn, dialect)))

        try:
            return await trio.to_thread.run_sync(run, limiter=self._read_limiter)
        except Exception as exc:
            outage = self._outage(exc)
            if outage is None:
                raise
            raise outage from outage.__cause__

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        """One row. A point read is run inline where the backend allows it (the SQLite
        file: ~8 us instead of ~290 us for the round trip to a worker thread)."""
        self._live_writer()
        dialect = self._dialect
        try:
            done, row = dialect.run_inline_read(
                lambda conn: _ConnTx(conn, dialect).fetchone(sql, params)
            )
        except Exception as exc:
            outage = self._outage(exc)
            if outage is None:
                raise
            raise outage from outage.__cause__
        if done:
            await trio.lowlevel.checkpoint()
            return row
        return await self._read(lambda tx: tx.fetchone(sql, params))

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        return await self._read(lambda tx: tx.fetchall(sql, params))

    # -- writes ------------------------------------------------------------

    async def execute(self, sql: str, params: Params = ()) -> int:
        query = self._dialect.sql(sql)
        args = tuple(params)

        def run(conn: Any) -> int:
            return int(conn.execute(query, args).rowcount)

        return await self._write(run, (query, args))

    async def execute_many(self, sql: str, seq_of_params: Iterable[Params]) -> int:
        dialect = self._dialect
        rows = [tuple(p) for p in seq_of_params]
        if not rows:
            self._live_writer()
            await trio.lowlevel.checkpoint()
            return 0
        return await self._write(lambda conn: _ConnTx(conn, dialect).execute_many(sql, rows))

    async def transaction(self, fn: Callable[[Tx], T]) -> T:
        dialect = self._dialect
        return await self._write(lambda conn: fn(_ConnTx(conn, dialect)))

    async def _write(self, fn: Callable[[Any], T], stmt: Statement | None = None) -> T:
        try:
            return await self._live_writer().submit(fn, stmt)
        except Exception as exc:
            outage = self._outage(exc)
            if outage is None:
                raise
            raise outage from outage.__cause__

    # -- introspection -----------------------------------------------------

    def statistics(self) -> StoreStatistics:
        stats = self._writer.stats if self._writer is not None else self._closed_stats
        pending = self._writer.pending if self._writer is not None else 0
        return StoreStatistics(
            batches_committed=stats.batches_committed,
            writes_committed=stats.writes_committed,
            largest_batch=stats.largest_batch,
            pending=pending,
            writes_failed=stats.writes_failed,
            batches_failed=stats.batches_failed,
            commit_seconds=stats.commit_seconds.copy(),
        )

    def versions(self) -> dict[str, str]:
        return dict(self._versions)

    def __repr__(self) -> str:
        state = "open" if self._writer is not None else "closed"
        return f"<{type(self).__name__} {self.kind} {state}>"
