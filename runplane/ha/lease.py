"""The leader lease: one row of ``ha_lease`` (migration 0026) and PostgreSQL advisory locks.

The row says who leads (``holder``, its advertised ``address``), its fencing ``epoch`` and
until when (``expires_at``, the database's clock, unix ms). A replica takes the lease when

* there is no row yet, or
* the lease has expired (its leader stopped renewing: paused, cut off, too slow), or
* the leader's session is gone: the leader of epoch ``E`` holds the session-level advisory
  lock ``(LOCK_CLASS, E)`` on its lease connection, which PostgreSQL releases the moment
  that connection ends (the process was killed, its connection cut). A follower that can
  take that lock knows at once, without waiting for the expiry.

Taking it moves the epoch from ``E`` to ``E + 1`` with an UPDATE conditioned on ``E``, and
only under the advisory lock ``(LOCK_CLASS, E + 1)``, which the new leader keeps: two
followers can never both move ``E`` forward, and the lock then stands for the new leader's
session. Every COMMIT of the leader checks its epoch against the row in the same round trip
and holds a share lock on it while it commits (``FENCE_SQL`` in
``runplane/persistence/postgres.py``), so the UPDATE of a takeover waits for a commit in
flight and no write of an old leader commits afterwards.

All calls are synchronous (psycopg's sync API): the elector runs them in worker threads,
one at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

#: advisory lock namespace (int4) of the leader sessions; the second key is the epoch
LOCK_CLASS = 0x52504C48  # "RPLH"
#: the database's clock in unix ms (clock_timestamp: not frozen at the transaction start)
_DB_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint"


@dataclass(frozen=True, slots=True)
class LeaseRow:
    epoch: int
    holder: str
    address: str
    acquired_at: int
    expires_at: int
    #: the database's clock when the row was read
    now: int

    @property
    def expired(self) -> bool:
        return self.expires_at <= self.now


class LeaseLost(Exception):
    """The lease is not this replica's any more (another epoch holds it, or its session
    ended and with it the advisory lock)."""


def _key(epoch: int) -> int:
    return epoch % 2**31  # the advisory lock's second key is an int4


class LeaseClient:
    """One replica's side of the lease, over its own connection (never the store's)."""

    def __init__(
        self, url: str, replica: str, address: str, ttl_ms: int, *, connect_timeout: int = 3
    ) -> None:
        self.url = url
        self.replica = replica
        self.address = address
        self.ttl_ms = ttl_ms
        self.connect_timeout = connect_timeout
        self.epoch: int | None = None  # while this replica leads
        self._conn: psycopg.Connection[Any] | None = None

    # -- the connection

    def _connection(self) -> psycopg.Connection[Any]:
        conn = self._conn
        if conn is not None and not (conn.closed or conn.broken):
            return conn
        if self.epoch is not None:
            # the session that held this epoch's advisory lock is gone: followers may
            # already have taken over
            raise LeaseLost(f"the lease connection of epoch {self.epoch} ended")
        conn = psycopg.connect(
            self.url,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=self.connect_timeout,
            application_name=f"runplane-lease {self.replica}",
        )
        # a takeover's UPDATE may wait for an old leader's commit in flight: never long
        conn.execute("SET lock_timeout = '2s'")
        conn.execute("SET statement_timeout = '5s'")
        self._conn = conn
        return conn

    def close(self) -> None:
        """Close the connection (its advisory lock goes with it); under psycopg's lock, so
        never under a call still running on it in another thread (an abandoned one)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            with conn.lock:
                conn.close()

    # -- reading

    def read(self) -> LeaseRow | None:
        row = (
            self._connection()
            .execute(
                "SELECT epoch, holder, address, acquired_at, expires_at, "
                f"{_DB_NOW} AS now FROM ha_lease WHERE name = 'leader'"
            )
            .fetchone()
        )
        return None if row is None else LeaseRow(**row)

    # -- taking, renewing, giving back

    def try_take(self) -> tuple[int | None, LeaseRow | None]:
        """Take the lease if its leader is gone: (the new epoch or None, the row read)."""
        conn = self._connection()
        row = self.read()
        if row is not None and not row.expired and not self._session_gone(conn, row.epoch):
            return None, row
        epoch = 1 if row is None else row.epoch + 1
        if not self._try_lock(conn, epoch):
            return None, row  # another replica is taking it now
        if row is None:
            taken = conn.execute(
                "INSERT INTO ha_lease (name, epoch, holder, address, acquired_at, expires_at) "
                f"VALUES ('leader', %s, %s, %s, {_DB_NOW}, {_DB_NOW} + %s) "
                "ON CONFLICT (name) DO NOTHING",
                (epoch, self.replica, self.address, self.ttl_ms),
            ).rowcount
        else:
            taken = conn.execute(
                "UPDATE ha_lease SET epoch = %s, holder = %s, address = %s, "
                f"acquired_at = {_DB_NOW}, expires_at = {_DB_NOW} + %s "
                "WHERE name = 'leader' AND epoch = %s",
                (epoch, self.replica, self.address, self.ttl_ms, row.epoch),
            ).rowcount
        if taken != 1:
            conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, _key(epoch)))
            return None, row
        self.epoch = epoch
        return epoch, self.read()

    def renew(self) -> int:
        """Extend the lease by its TTL from now (database clock); its new end, unix ms.
        Raises LeaseLost when another epoch holds it or it had already expired."""
        if self.epoch is None:
            raise LeaseLost("this replica does not lead")
        row = (
            self._connection()
            .execute(
                f"UPDATE ha_lease SET expires_at = {_DB_NOW} + %s WHERE name = 'leader' "
                f"AND epoch = %s AND expires_at > {_DB_NOW} RETURNING expires_at",
                (self.ttl_ms, self.epoch),
            )
            .fetchone()
        )
        if row is None:
            raise LeaseLost(f"epoch {self.epoch} is over: another replica holds the lease")
        return int(row["expires_at"])

    def release(self) -> None:
        """Give the lease back (a clean stop): followers take it at their next look."""
        epoch, self.epoch = self.epoch, None
        conn = self._conn
        if epoch is None or conn is None or conn.closed or conn.broken:
            return
        conn.execute(
            "UPDATE ha_lease SET expires_at = 0 WHERE name = 'leader' AND epoch = %s", (epoch,)
        )
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, _key(epoch)))

    # -- the leader session's advisory lock

    @staticmethod
    def _try_lock(conn: psycopg.Connection[Any], epoch: int) -> bool:
        row = conn.execute(
            "SELECT pg_try_advisory_lock(%s, %s) AS got", (LOCK_CLASS, _key(epoch))
        ).fetchone()
        return bool(row and row["got"])

    def _session_gone(self, conn: psycopg.Connection[Any], epoch: int) -> bool:
        """True when nobody holds epoch ``epoch``'s lock: its leader's session ended."""
        if not self._try_lock(conn, epoch):
            return False
        conn.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, _key(epoch)))
        return True
