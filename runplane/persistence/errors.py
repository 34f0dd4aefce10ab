"""Exceptions of the persistence layer (driver errors pass through unchanged)."""

from __future__ import annotations


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
