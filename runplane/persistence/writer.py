"""Group commit: one writer thread commits the writes of many trio tasks together.

Trio tasks call :meth:`GroupCommitWriter.submit` with a synchronous function of
the writer connection. The call appends the function to a queue and parks the
task (``trio.lowlevel.wait_task_rescheduled``): no worker thread is held per
waiting write, so thousands of tasks may write at once.

The writer thread takes everything pending (up to ``max_batch``), and runs it
in ONE transaction::

    BEGIN                                  (dialect.begin_sql)
      SAVEPOINT rp_write; <write 1>; RELEASE SAVEPOINT rp_write
      SAVEPOINT rp_write; <write 2>  -> error: ROLLBACK TO SAVEPOINT rp_write
      ...
    COMMIT

A write that raises is rolled back to its savepoint and fails alone with its own
exception; the others commit. (A batch of one write needs no savepoint.) Once
COMMIT has returned (the dialect makes that durable: fsync'ed WAL for SQLite,
``synchronous_commit=on`` for PostgreSQL), ONE ``token.run_sync_soon`` call
reschedules every task of the batch with its result. The cost of a commit (the
fsync) is thus shared by the whole batch: the more writers wait, the bigger the
batches, with no timer and no added latency for a lone writer.

Cancellation: a write still queued when its task is cancelled is dropped (it
never runs, the task sees ``Cancelled``). A write the writer has already taken
runs to completion; its task gets the result and sees the cancellation at its
next checkpoint, so "was it written?" always has a definite answer.
"""

from __future__ import annotations

import collections
import contextlib
import enum
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import outcome
import trio

from runplane.histogram import Histogram
from runplane.persistence.errors import StoreClosedError, TransactionAbortedError, WriteBatchError

if TYPE_CHECKING:
    from runplane.persistence.store import Dialect

log = logging.getLogger(__name__)

T = TypeVar("T")
SAVEPOINT = "rp_write"  # one name, reused: each is released before the next


class _State(enum.Enum):
    QUEUED = enum.auto()
    TAKEN = enum.auto()
    CANCELLED = enum.auto()


Statement = tuple[str, tuple[Any, ...]]


class _Op:
    __slots__ = ("fn", "result", "state", "stmt", "task")

    def __init__(
        self, fn: Callable[[Any], Any], task: trio.lowlevel.Task, stmt: Statement | None
    ) -> None:
        self.fn = fn
        self.stmt = stmt  # set for a plain single statement: lets the dialect pipeline it
        self.task = task
        self.state = _State.QUEUED
        self.result: outcome.Outcome[Any] | None = None


@dataclass(slots=True)
class WriterStatistics:
    """Counters, only ever updated by the writer thread."""

    batches_committed: int = 0
    writes_committed: int = 0
    largest_batch: int = 0
    writes_failed: int = 0
    batches_failed: int = 0
    #: seconds from a batch's BEGIN to its COMMIT returning (committed batches)
    commit_seconds: Histogram = field(default_factory=Histogram)


class GroupCommitWriter:
    """The single writer thread of a store and its queue."""

    def __init__(
        self,
        conn: Any,
        dialect: Dialect,
        token: trio.lowlevel.TrioToken,
        *,
        max_batch: int = 512,
        name: str = "runplane-writer",
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        self._conn: Any = conn
        self._dialect = dialect
        self._token = token
        self._max_batch = max_batch
        self._cond = threading.Condition(threading.Lock())
        self._queue: collections.deque[_Op] = collections.deque()
        self._pending = 0
        self._writer_idle = False
        self._closing = False
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self.stats = WriterStatistics()

    @property
    def pending(self) -> int:
        """Writes queued and not yet taken by the writer thread."""
        return self._pending

    def start(self) -> None:
        self._thread.start()

    # -- trio side ---------------------------------------------------------

    async def submit(self, fn: Callable[[Any], T], stmt: Statement | None = None) -> T:
        """Queue ``fn(conn)`` for the next batch; return its result once committed.

        ``stmt`` (dialect SQL, params) may be given when ``fn`` runs exactly that
        one statement and returns its rowcount: a dialect that can pipeline
        (PostgreSQL) then sends a run of such writes in one round trip.
        """
        op = _Op(fn, trio.lowlevel.current_task(), stmt)
        with self._cond:
            if self._closing:
                raise StoreClosedError("store is closed")
            self._queue.append(op)
            self._pending += 1
            if self._writer_idle:
                self._cond.notify()

        def abort(_: Any) -> trio.lowlevel.Abort:
            with self._cond:
                if op.state is _State.QUEUED:
                    op.state = _State.CANCELLED
                    self._pending -= 1
                    return trio.lowlevel.Abort.SUCCEEDED
            # already taken by the writer: wait for its definite result
            return trio.lowlevel.Abort.FAILED

        result: T = await trio.lowlevel.wait_task_rescheduled(abort)
        return result

    @staticmethod
    def _wake(batch: list[_Op]) -> None:
        for op in batch:
            assert op.result is not None
            trio.lowlevel.reschedule(op.task, op.result)

    # -- lifecycle (blocking; call from a worker thread) -------------------

    def stop_and_join(self) -> None:
        """Refuse new writes, commit everything queued, close the connection."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join()
        elif self._conn is not None:  # never started
            self._close_conn()

    # -- writer thread -----------------------------------------------------

    def _main(self) -> None:
        try:
            while True:
                batch = self._take()
                if batch is None:
                    return
                try:
                    self._run_batch(batch)
                except BaseException as exc:  # a bug here must not strand the callers
                    log.exception("group-commit writer failed")
                    for op in batch:
                        if op.result is None or isinstance(op.result, outcome.Value):
                            op.result = outcome.Error(
                                WriteBatchError(f"write not committed: {exc!r}", exc)
                            )
                with contextlib.suppress(trio.RunFinishedError):
                    self._token.run_sync_soon(self._wake, batch)
        finally:
            self._close_conn()

    def _take(self) -> list[_Op] | None:
        """Block until writes are pending; take up to ``max_batch`` (None: closed)."""
        queue = self._queue
        with self._cond:
            while True:
                while not queue:
                    if self._closing:
                        return None
                    self._writer_idle = True
                    self._cond.wait()
                    self._writer_idle = False
                batch: list[_Op] = []
                while queue and len(batch) < self._max_batch:
                    op = queue.popleft()
                    if op.state is _State.QUEUED:  # skip writes cancelled while queued
                        op.state = _State.TAKEN
                        batch.append(op)
                self._pending -= len(batch)
                if batch:
                    return batch

    def _close_conn(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                self._dialect.close_connection(conn)
            except Exception:
                log.exception("closing the writer connection failed")

    def _connection(self) -> Any:
        dialect = self._dialect
        if self._conn is not None and not dialect.writer_usable(self._conn):
            log.warning("writer connection unusable; reconnecting")
            self._close_conn()
        if self._conn is None:
            self._conn = dialect.connect_writer()
        return self._conn

    def _begin(self) -> Any:
        """BEGIN on a usable connection. Nothing has run yet, so a connection
        found dead here (server restarted, idle timeout) is replaced and BEGIN
        retried once, invisibly to the writers."""
        conn = self._connection()
        try:
            conn.execute(self._dialect.begin_sql)
        except Exception:
            if self._dialect.writer_usable(conn):
                raise
            log.warning("writer connection lost; reconnecting", exc_info=True)
            conn = self._connection()
            conn.execute(self._dialect.begin_sql)
        return conn

    def _run_batch(self, batch: list[_Op]) -> None:
        if not batch:
            return
        guard = self._dialect.batch_guard()
        with guard if guard is not None else contextlib.nullcontext():
            self._run_batch_locked(batch)

    def _run_batch_locked(self, batch: list[_Op]) -> None:
        stats = self.stats
        began = time.perf_counter()
        try:
            conn = self._begin()
        except Exception as exc:
            self._fail_batch(batch, exc, "could not begin the batch transaction")
            return

        dialect = self._dialect
        if len(batch) == 1:
            op = batch[0]
            op.result = self._run_op(conn, op)
            if isinstance(op.result, outcome.Error):
                stats.writes_failed += 1
                self._rollback(conn)
                return
        else:
            i = 0
            while i < len(batch):
                run_end = i
                if dialect.pipelined:
                    while run_end < len(batch) and batch[run_end].stmt is not None:
                        run_end += 1
                if run_end - i >= 2:
                    if not self._run_pipelined(conn, batch, i, run_end):
                        return
                    i = run_end
                else:
                    if not self._run_with_savepoint(conn, batch, batch[i]):
                        return
                    i += 1

        if dialect.transaction_aborted(conn):  # never let COMMIT silently roll back
            aborted = RuntimeError("the batch transaction was aborted before COMMIT")
            self._fail_batch(batch, aborted, "the batch transaction was aborted")
            return
        try:
            dialect.commit(conn)
        except Exception as exc:
            self._fail_batch(batch, exc, "commit failed")
            return
        stats.commit_seconds.observe(time.perf_counter() - began)
        committed = sum(1 for op in batch if isinstance(op.result, outcome.Value))
        stats.batches_committed += 1
        stats.writes_committed += committed
        stats.largest_batch = max(stats.largest_batch, len(batch))

    def _run_with_savepoint(self, conn: Any, batch: list[_Op], op: _Op) -> bool:
        """Run one write of a batch under a SAVEPOINT; False if the batch is lost."""
        try:
            conn.execute(f"SAVEPOINT {SAVEPOINT}")
        except Exception as exc:
            self._fail_batch(batch, exc, "could not set a savepoint")
            return False
        op.result = self._run_op(conn, op)
        if isinstance(op.result, outcome.Value):
            try:
                conn.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
                return True
            except Exception as exc:
                op.result = outcome.Error(exc)
        self.stats.writes_failed += 1
        try:
            conn.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
            conn.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
        except Exception as exc:
            # the engine rolled back the whole transaction (SQLite on disk full / I/O
            # error: the write's own error says why, and is the batch's cause) or the
            # connection broke
            own = op.result.error if isinstance(op.result, outcome.Error) else None
            cause = own if own is not None and self._dialect.full(own) is not None else exc
            self._fail_batch(batch, cause, "the batch transaction was aborted")
            return False
        return True

    def _run_pipelined(self, conn: Any, batch: list[_Op], start: int, end: int) -> bool:
        """Run plain statements ``batch[start:end]`` through the dialect's pipeline."""
        ops = batch[start:end]
        try:
            results = self._dialect.run_statements(conn, [op.stmt for op in ops if op.stmt])
        except Exception as exc:
            self._fail_batch(batch, exc, "the batch transaction was aborted")
            return False
        for op, result in zip(ops, results, strict=True):
            op.result = result
            if isinstance(result, outcome.Error):
                self.stats.writes_failed += 1
        return True

    def _run_op(self, conn: Any, op: _Op) -> outcome.Outcome[Any]:
        result: outcome.Outcome[Any] = outcome.capture(op.fn, conn)
        if isinstance(result, outcome.Value) and self._dialect.transaction_aborted(conn):
            # the function swallowed a database error that aborted the
            # transaction (PostgreSQL), or ended the transaction itself
            return outcome.Error(
                TransactionAbortedError(
                    "the write left its transaction aborted or ended (a database error "
                    "swallowed, or COMMIT/ROLLBACK issued inside the write?); rolled back"
                )
            )
        return result

    def _fail_batch(self, batch: list[_Op], exc: BaseException, what: str) -> None:
        self.stats.batches_failed += 1
        for op in batch:
            if op.result is None or isinstance(op.result, outcome.Value):
                self.stats.writes_failed += 1
                op.result = outcome.Error(
                    WriteBatchError(f"write not committed: {what}: {exc}", exc)
                )
        if self._conn is not None:
            self._rollback(self._conn)

    def _rollback(self, conn: Any) -> None:
        try:
            conn.execute("ROLLBACK")
        except Exception:
            # no transaction open (engine already rolled back) or connection
            # broken: the next batch reconnects if needed
            log.debug("rollback failed", exc_info=True)
