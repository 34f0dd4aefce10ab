"""Exceptions of the persistence layer.

Driver errors pass through unchanged, except those that say the store cannot be reached
(:class:`StoreUnavailableError`: the dialect classifies them, runplane/persistence/store.py).
"""

from __future__ import annotations

from typing import TypeVar


class StoreClosedError(RuntimeError):
    """The store is not open (never opened, or already closed)."""


class WriteBatchError(RuntimeError):
    """This write was not committed because its whole batch failed.

    Raised to the writes of a group-commit batch whose transaction could not be
    begun or committed (connection lost, disk full, ...), or that was aborted by
    another write's error in a way a SAVEPOINT could not contain. ``__cause__``
    (and ``cause``) hold the driver's exception. A write that fails by itself
    (constraint violation, SQL error, exception in a ``transaction`` function)
    gets its own exception instead, and the rest of its batch commits.
    """

    def __init__(self, message: str, cause: BaseException) -> None:
        super().__init__(message)
        self.cause = cause
        self.__cause__ = cause


class TransactionAbortedError(RuntimeError):
    """A write returned normally but left its transaction unusable.

    E.g. a ``transaction`` function caught a PostgreSQL error and carried on
    (PostgreSQL then refuses everything until rollback), or ran COMMIT/ROLLBACK
    itself. The write is rolled back; the rest of its batch still commits.
    """


class FencedError(RuntimeError):
    """This replica no longer leads (``RUNPLANE_HA=1``): its fencing epoch is not the
    lease's, so its writes are refused and nothing of them was committed.

    Raised (as the cause of a :class:`WriteBatchError`) to every write of a batch whose
    COMMIT met another leader's epoch, and by a replica that never led. See
    docs/operations.md "High availability".
    """


class StoreUnavailableError(RuntimeError):
    """The store cannot be reached right now: PostgreSQL down, refusing connections or
    out of connection slots, the read pool found no connection in time, SQLite's file
    locked by another process past the busy timeout or its disk failing (I/O errors).

    Raised by the store in place of the driver's exception (kept as ``__cause__``), for
    reads and writes alike, so the layers above tell "retry later" from a bug without
    knowing the driver: the HTTP layer answers ``503 store_unavailable`` with
    ``Retry-After``. A write that raises it was not committed (see
    :class:`StoreUnavailableWriteError`).
    """


class StoreUnavailableWriteError(WriteBatchError, StoreUnavailableError):
    """A write whose batch failed because the store could not be reached: nothing of it
    was committed (a :class:`WriteBatchError` and a :class:`StoreUnavailableError`)."""


class StoreFullError(RuntimeError):
    """The store's disk is full: SQLite answered SQLITE_FULL ("database or disk is full")
    or the OS ENOSPC/EDQUOT, PostgreSQL SQLSTATE 53100 ``disk_full``. Its message names
    what is full (the data dir, or the PostgreSQL server's disk).

    Raised by the store in place of the driver's exception (kept as ``__cause__``). The
    write was rolled back, nothing of it was committed; the writer keeps serving, reads
    still work, and the next write succeeds once space was freed. The HTTP layer answers
    ``507 insufficient_storage`` (docs/operations.md "Full disks").
    """


class StoreFullWriteError(WriteBatchError, StoreFullError):
    """A write whose batch failed because the store's disk is full: nothing of it was
    committed (a :class:`WriteBatchError` and a :class:`StoreFullError`)."""


E = TypeVar("E", bound=BaseException)


def store_outage(exc: BaseException) -> StoreUnavailableError | None:
    """The :class:`StoreUnavailableError` behind ``exc``: itself, its cause or context (an
    actor that crashed on it, ``ActorCrashed.__cause__``), or one inside an exception
    group; None when the store is not to blame."""
    return _behind(exc, StoreUnavailableError)


def store_full(exc: BaseException) -> StoreFullError | None:
    """The :class:`StoreFullError` behind ``exc`` (found as :func:`store_outage` finds
    an outage); None when the store's disk is not to blame."""
    return _behind(exc, StoreFullError)


def _behind(exc: BaseException, kind: type[E]) -> E | None:
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        error = pending.pop()
        if id(error) in seen:
            continue
        seen.add(id(error))
        if isinstance(error, kind):
            return error
        if isinstance(error, BaseExceptionGroup):
            pending.extend(error.exceptions)
        for linked in (error.__cause__, error.__context__):
            if linked is not None:
                pending.append(linked)
    return None
