"""PostgreSQL backend: psycopg's SYNC API from threads (its async API is asyncio-only).

* writes: the shared group-commit writer thread on ONE autocommit connection
  driving explicit ``BEGIN`` / ``SAVEPOINT`` / ``COMMIT``, with
  ``synchronous_commit = on`` so COMMIT returns only once the WAL is flushed
  (acknowledged = durable, whatever the server default);
* reads: a ``psycopg_pool.ConnectionPool`` of autocommit connections used from
  trio worker threads;
* migrations: serialized across processes by ``pg_advisory_xact_lock``.

SQL is the portable dialect: ``?`` placeholders are translated to ``%s`` (and a
literal ``%`` to ``%%``) by :func:`qmark_to_pyformat`.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import outcome
import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from runplane.persistence.errors import FencedError
from runplane.persistence.migrate import Migration
from runplane.persistence.store import Dialect, SqlStore
from runplane.persistence.writer import SAVEPOINT, Statement

T = TypeVar("T")

#: pg_advisory_xact_lock key serializing migrations ("runplane" in ASCII)
MIGRATION_LOCK_KEY = int.from_bytes(b"runplane", "big")

_OK = (psycopg.pq.ExecStatus.COMMAND_OK, psycopg.pq.ExecStatus.TUPLES_OK)

#: The fencing check run with every COMMIT of a replica under ``RUNPLANE_HA=1``: it fails
#: (division by zero) unless the lease row still holds this replica's epoch, and its share
#: lock makes a takeover (an UPDATE of that row, runplane/ha/lease.py) wait for the commit
#: in flight, so no write of an old leader commits after a new one took the lease.
FENCE_SQL = "SELECT 1 / (epoch = %s)::int AS ok FROM ha_lease WHERE name = 'leader' FOR SHARE"


#: SQLSTATEs that say the server cannot serve this connection (not that a statement is
#: wrong): class 08 (connection exceptions), 57P01-57P03 (shut down, crashed, not accepting
#: connections yet), 53300 (too many connections).
UNREACHABLE_STATES = ("08", "57P01", "57P02", "57P03", "53300")


def postgres_unreachable(exc: BaseException) -> bool:
    """True for a psycopg error that says PostgreSQL cannot be reached right now: no
    connection (refused, lost, timed out: no SQLSTATE, the client's own error), a pool
    that found none in time (``PoolTimeout``), or one of :data:`UNREACHABLE_STATES`."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    if isinstance(exc, psycopg_pool.PoolTimeout):
        return True
    state = exc.sqlstate
    return state is None or state.startswith(UNREACHABLE_STATES)


#: SQLSTATE 53100 ``disk_full``: the PostgreSQL server could not extend a file or its WAL.
DISK_FULL_STATE = "53100"


def postgres_full(exc: BaseException) -> bool:
    """True for a psycopg error that says the PostgreSQL server's disk is full."""
    return isinstance(exc, psycopg.Error) and exc.sqlstate == DISK_FULL_STATE


class Fence:
    """A replica's fencing token: ``epoch`` is set while it leads, None otherwise (its
    writes are then refused). ``on_fenced`` is called (from the writer thread) when a
    commit met another leader's epoch. One fence serves one term of a replica (one store):
    revoked at a lost lease (:meth:`revoke`), it never lets a commit through again, and
    its writer never connects again, whatever epoch is set afterwards."""

    def __init__(self, *, idle_timeout_ms: int) -> None:
        self.epoch: int | None = None
        #: PostgreSQL ends a writer transaction left idle longer than this (a paused
        #: replica's), so its row locks never hold a new leader up
        self.idle_timeout_ms = idle_timeout_ms
        self.on_fenced: Callable[[], object] = lambda: None
        self.revoked = False

    def revoke(self) -> None:
        """The lease of this term is lost: refuse every later commit (a commit already
        sent is decided by the database, against the lease row's epoch)."""
        self.revoked = True
        self.epoch = None

    def check(self) -> int:
        """The epoch to commit under; raises :class:`FencedError` when there is none."""
        epoch = self.epoch
        if self.revoked or epoch is None:
            raise FencedError("this replica does not lead: its writes are refused")
        return epoch


def _done(cursor: psycopg.Cursor[Any]) -> bool:
    result = cursor.pgresult
    return result is not None and result.status in _OK


def _send_isolated(
    conn: psycopg.Connection[Any],
    statements: Sequence[Statement],
    sent: list[tuple[psycopg.Cursor[Any], ...]],
) -> None:
    for query, args in statements:
        # cursors are created first and kept even if execute() raises: their
        # result status tells afterwards which statements ran
        step = (conn.cursor(), conn.cursor(), conn.cursor())
        sent.append(step)
        step[0].execute(f"SAVEPOINT {SAVEPOINT}")
        step[1].execute(query, args)
        step[2].execute(f"RELEASE SAVEPOINT {SAVEPOINT}")


def _pipeline(conn: psycopg.Connection[Any], send: Callable[[], object]) -> psycopg.Error | None:
    """Run ``send()`` inside a pipeline and sync; return the first error, if any.

    In pipeline mode an error can surface from any later call (an ``execute``
    that reads pending results, the sync, or the block's exit).
    """
    error: psycopg.Error | None = None
    try:
        with conn.pipeline() as pipeline:
            try:
                send()
                pipeline.sync()
            except psycopg.Error as exc:
                error = exc
    except psycopg.errors.PipelineAborted:
        if error is None:
            raise
    return error


_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$")


@functools.lru_cache(maxsize=2048)
def qmark_to_pyformat(sql: str) -> str:
    """Translate ``?`` placeholders to psycopg's ``%s``, escaping literal ``%`` as ``%%``.

    A ``?`` inside a quoted string, a quoted identifier, a comment or a
    dollar-quoted body is left alone. ``%`` is doubled everywhere, because
    psycopg scans the whole text for placeholders when parameters are passed
    (and the store always passes them).
    """
    out: list[str] = []
    i, n = 0, len(sql)
    while i < n:
        c = sql[i]
        if c == "?":
            out.append("%s")
            i += 1
            continue
        if c in "'\"":
            end = i + 1
            while end < n:
                if sql[end] == c:
                    if end + 1 < n and sql[end + 1] == c:  # doubled quote = escaped
                        end += 2
                        continue
                    break
                end += 1
            out.append(sql[i : end + 1].replace("%", "%%"))
            i = end + 1
            continue
        if sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end == -1 else end
            out.append(sql[i:end].replace("%", "%%"))
            i = end
            continue
        if sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end == -1 else end + 2
            out.append(sql[i:end].replace("%", "%%"))
            i = end
            continue
        if c == "$" and (i == 0 or not (sql[i - 1].isalnum() or sql[i - 1] == "_")):
            m = _DOLLAR_TAG.match(sql, i)
            if m is not None:
                close = sql.find(m.group(), m.end())
                end = n if close == -1 else close + len(m.group())
                out.append(sql[i:end].replace("%", "%%"))
                i = end
                continue
        out.append("%%" if c == "%" else c)
        i += 1
    return "".join(out)


#: How long a read waits for a pooled connection before it fails (PoolTimeout: the store
#: is unavailable). Reads never queue for one (the store's limiter is the pool's size), so
#: a wait is the pool reconnecting to a server that went away.
POOL_WAIT_SEC = 5.0


class PostgresDialect(Dialect):
    name = "postgres"
    begin_sql = "BEGIN"
    pipelined = True

    def __init__(
        self,
        url: str,
        *,
        read_pool_size: int = 8,
        connect_timeout: int = 10,
        fence: Fence | None = None,
    ) -> None:
        self.url = url
        self.read_concurrency = read_pool_size
        self._connect_timeout = connect_timeout
        self._pool: psycopg_pool.ConnectionPool[Any] | None = None
        self.fence = fence

    def sql(self, query: str) -> str:
        return qmark_to_pyformat(query)

    def connect_writer(self) -> psycopg.Connection[Any]:
        if self.fence is not None and self.fence.revoked:
            # a replica that lost its lease: its queued writes fail at once, none waits
            # for a connection (the database may be restarting)
            raise FencedError("this replica lost its lease: its writes are refused")
        conn = psycopg.connect(
            self.url,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=self._connect_timeout,
            application_name="runplane-writer",
            # No automatic server-side prepared statements on the writer: when a
            # pipeline aborts, a PREPARE queued in it is skipped by the server
            # while psycopg records it as done ("prepared statement _pg3_N does
            # not exist" later). Writes are simple statements; planning is cheap.
            prepare_threshold=None,
        )
        conn.execute("SET synchronous_commit = on")
        if self.fence is not None:
            conn.execute(
                "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
                (str(self.fence.idle_timeout_ms),),
            )
        return conn

    def commit(self, conn: psycopg.Connection[Any]) -> None:
        fence = self.fence
        if fence is None:
            conn.execute("COMMIT")
            return
        epoch = fence.check()

        def send() -> None:  # one round trip: no pause between the check and the COMMIT
            conn.execute(FENCE_SQL, (epoch,))
            conn.execute("COMMIT")

        error = _pipeline(conn, send)
        if isinstance(error, psycopg.errors.DivisionByZero):
            fence.epoch = None
            fence.on_fenced()
            raise FencedError(
                f"another replica leads now (this one's epoch {epoch} is over): "
                "the write is refused"
            ) from error
        if error is not None:
            raise error

    def unreachable(self, exc: BaseException) -> bool:
        return postgres_unreachable(exc)

    def full(self, exc: BaseException) -> str | None:
        if not postgres_full(exc):
            return None
        return (
            "the PostgreSQL server's disk is full (SQLSTATE 53100 disk_full), so nothing "
            "was written: free space on the database server, then retry"
        )

    def writer_usable(self, conn: psycopg.Connection[Any]) -> bool:
        return not (conn.closed or conn.broken)

    def transaction_aborted(self, conn: psycopg.Connection[Any]) -> bool:
        return conn.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS

    def run_statements(
        self, conn: psycopg.Connection[Any], statements: Sequence[Statement]
    ) -> list[outcome.Outcome[int]]:
        """Run a batch's plain statements in a pipeline: one round trip, not one each.

        Fast path: ``SAVEPOINT; s1; s2; ...; RELEASE`` in ONE pipeline. If any
        statement fails, the run is rolled back to that savepoint and redone
        statement by statement (:meth:`_run_isolated`), so only the failing
        writes fail. Re-running plain SQL is safe: the first run left no trace.
        """
        fast = self._run_all_or_nothing(conn, statements)
        return fast if fast is not None else self._run_isolated(conn, statements)

    def _run_all_or_nothing(
        self, conn: psycopg.Connection[Any], statements: Sequence[Statement]
    ) -> list[outcome.Outcome[int]] | None:
        cursors: list[psycopg.Cursor[Any]] = []

        def send() -> None:
            conn.execute(f"SAVEPOINT {SAVEPOINT}")
            for query, args in statements:
                cur = conn.cursor()
                cursors.append(cur)
                cur.execute(query, args)
            conn.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")

        error = _pipeline(conn, send)
        if error is None:
            return [outcome.Value(max(cur.rowcount, 0)) for cur in cursors]
        conn.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
        conn.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
        return None

    def _run_isolated(
        self, conn: psycopg.Connection[Any], statements: Sequence[Statement]
    ) -> list[outcome.Outcome[int]]:
        """``SAVEPOINT; <statement>; RELEASE`` for each statement, still pipelined.

        When a statement fails, the server skips everything after it up to the
        pipeline's Sync: the statements before it are done (their savepoints
        released), the failing one is rolled back to its savepoint and gets the
        error, and the rest are sent again in a new pipeline.
        """
        results: list[outcome.Outcome[int]] = []
        pending = list(statements)
        while pending:
            sent: list[tuple[psycopg.Cursor[Any], ...]] = []
            error = _pipeline(conn, functools.partial(_send_isolated, conn, pending, sent))
            if error is None:
                results.extend(outcome.Value(max(step[1].rowcount, 0)) for step in sent)
                return results
            for index, (savepoint, statement, release) in enumerate(sent):
                if _done(savepoint) and _done(statement) and _done(release):
                    results.append(outcome.Value(max(statement.rowcount, 0)))
                    continue
                if not _done(savepoint):
                    raise error  # not the statement's fault: the batch is lost
                results.append(outcome.Error(error))
                conn.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
                conn.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
                pending = pending[index + 1 :]
                break
            else:
                raise error  # every statement succeeded: the failure was elsewhere
        return results

    def begin_migration(self, conn: psycopg.Connection[Any]) -> None:
        conn.execute("BEGIN")
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK_KEY,))

    def table_exists(self, conn: psycopg.Connection[Any], table: str) -> bool:
        # Scan pg_class with this statement's snapshot. (to_regclass() may answer
        # from a stale catalog cache right after waiting on the advisory lock,
        # and miss a table another process created meanwhile.)
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_class c"
            " JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace"
            " WHERE c.relname = %s AND n.nspname = current_schema()"
            " AND c.relkind IN ('r', 'p')) AS present",
            (table,),
        ).fetchone()
        return bool(row and row["present"])

    def run_script(self, conn: psycopg.Connection[Any], script: str) -> None:
        # no parameters: psycopg sends the script as is, several statements allowed
        conn.execute(script.encode())

    def open_readers(self, writer_conn: Any) -> None:
        pool: psycopg_pool.ConnectionPool[Any] = psycopg_pool.ConnectionPool(
            self.url,
            min_size=1,
            max_size=self.read_concurrency,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "connect_timeout": self._connect_timeout,
                "application_name": "runplane-reader",
            },
            open=False,
            name="runplane-read",
        )
        pool.open(wait=True, timeout=self._connect_timeout)
        self._pool = pool

    def close_readers(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()

    @contextlib.contextmanager
    def reader(self) -> Iterator[psycopg.Connection[Any]]:
        if self._pool is None:
            raise psycopg.OperationalError("the read pool is closed")
        with self._pool.connection(timeout=POOL_WAIT_SEC) as conn:
            yield conn

    def run_read(self, fn: Callable[[psycopg.Connection[Any]], T]) -> T:
        # A pooled connection may have died while idle (server restart, idle
        # timeout); reads are safe to repeat, so retry once on a fresh one.
        for attempt in (1, 2):
            with self.reader() as conn:
                try:
                    return fn(conn)
                except psycopg.OperationalError:
                    if attempt == 2 or not conn.broken:
                        raise
        raise AssertionError("unreachable")

    def versions(self, conn: psycopg.Connection[Any]) -> dict[str, str]:
        row = conn.execute("SHOW server_version").fetchone()
        return {
            "postgres": str(row["server_version"]) if row else "?",
            "psycopg": psycopg.__version__,
            "libpq": str(psycopg.pq.version()),
        }


class PostgresStore(SqlStore):
    """``RUNPLANE_DATABASE_URL=postgresql://...``."""

    kind = "postgres"
    durable = True
    supports_identity = True

    def __init__(
        self,
        url: str,
        *,
        read_pool_size: int = 8,
        migrations: Sequence[Migration] | None = None,
        max_batch: int = 512,
        fence: Fence | None = None,
    ) -> None:
        super().__init__(
            PostgresDialect(url, read_pool_size=read_pool_size, fence=fence),
            migrations=migrations,
            max_batch=max_batch,
        )
