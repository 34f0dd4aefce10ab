"""Which store errors mean "the store cannot be reached" (issue 41 item 1), on real drivers:
the dialects classify them once and the store raises ``StoreUnavailableError`` in their
place; every other error (a bad statement, a constraint) passes through unchanged. The
HTTP layer finds the outage behind an actor's crash too (``store_outage``)."""

from __future__ import annotations

import socket
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import psycopg_pool
import pytest

from runplane.persistence import StoreUnavailableError, WriteBatchError
from runplane.persistence import sqlite as sqlite_backend
from runplane.persistence.errors import StoreUnavailableWriteError, store_outage
from runplane.persistence.postgres import PostgresStore, postgres_unreachable
from runplane.persistence.sqlite import SQLiteStore, sqlite_unreachable
from runplane.runtime.errors import ActorCrashed
from runplane.runtime.throttle import OnceEvery
from tests.conftest import pg_admin_url


def _error(fn: object) -> BaseException:
    try:
        fn()  # type: ignore[operator]
    except Exception as exc:
        return exc
    raise AssertionError("no error")


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port nothing listens on (bound, never listened: connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


# -- SQLite


def test_sqlite_locked_and_unopenable_files_are_unreachable(tmp_path: Path) -> None:
    db = tmp_path / "x.db"
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    holder.execute("BEGIN EXCLUSIVE")
    other = sqlite3.connect(db, isolation_level=None, timeout=0.05)
    locked = _error(lambda: other.execute("INSERT INTO t VALUES (1)"))
    assert "locked" in str(locked) and sqlite_unreachable(locked)
    holder.execute("ROLLBACK")
    missing = _error(lambda: sqlite3.connect(tmp_path / "no" / "such" / "dir.db"))
    assert sqlite_unreachable(missing)


def test_sqlite_statement_errors_are_not_unreachable(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO t VALUES (1)")
    assert not sqlite_unreachable(_error(lambda: conn.execute("SELEC 1")))
    assert not sqlite_unreachable(_error(lambda: conn.execute("SELECT nope FROM t")))
    assert not sqlite_unreachable(_error(lambda: conn.execute("INSERT INTO t VALUES (1)")))
    assert not sqlite_unreachable(ValueError("database is locked"))  # not the driver's


async def test_a_locked_sqlite_store_raises_store_unavailable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the write lock past the busy timeout (shortened here): the
    write fails as StoreUnavailableWriteError (still a WriteBatchError: not committed);
    reads go on (WAL), a bad statement is its own error; the store recovers."""
    monkeypatch.setattr(sqlite_backend, "BUSY_TIMEOUT_MS", 200)
    db = tmp_path / "runplane.db"
    async with SQLiteStore(db) as store:
        holder = sqlite3.connect(db, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        with pytest.raises(StoreUnavailableWriteError) as refused:
            await store.execute("DELETE FROM meta WHERE key = ?", ("nothing",))
        assert isinstance(refused.value, WriteBatchError)
        assert isinstance(refused.value.__cause__, sqlite3.OperationalError)
        assert "locked" in str(refused.value)
        with pytest.raises(StoreUnavailableError):
            await store.ping()
        assert await store.fetchone("SELECT 1 AS ok") == {"ok": 1}
        holder.execute("ROLLBACK")
        holder.close()
        with pytest.raises(sqlite3.OperationalError) as bad:
            await store.execute("SELEC 1")
        assert not isinstance(bad.value, StoreUnavailableError)
        await store.ping()
        assert await store.execute("DELETE FROM meta WHERE key = ?", ("nothing",)) == 0


# -- PostgreSQL


def test_refused_connections_and_pool_timeouts_are_unreachable(closed_port: int) -> None:
    url = f"postgresql://postgres@127.0.0.1:{closed_port}/postgres"
    refused = _error(lambda: psycopg.connect(url, connect_timeout=2))
    assert isinstance(refused, psycopg.OperationalError) and refused.sqlstate is None
    assert postgres_unreachable(refused)
    pool = psycopg_pool.ConnectionPool(url, min_size=1, open=False, reconnect_timeout=1)
    pool.open(wait=False)
    try:
        timed_out = _error(lambda: pool.getconn(timeout=0.3))
    finally:
        pool.close()
    assert isinstance(timed_out, psycopg_pool.PoolTimeout) and postgres_unreachable(timed_out)
    assert not postgres_unreachable(sqlite3.OperationalError("database is locked"))


@pytest.mark.postgres
def test_postgres_statement_errors_are_not_unreachable(pg_database: str) -> None:
    with psycopg.connect(pg_database, autocommit=True) as conn:
        assert not postgres_unreachable(_error(lambda: conn.execute("SELEC 1")))
        conn.execute("SET statement_timeout = 10")
        canceled = _error(lambda: conn.execute("SELECT pg_sleep(1)"))
        assert isinstance(canceled, psycopg.errors.QueryCanceled)
        assert not postgres_unreachable(canceled)  # an OperationalError, but no outage
    with psycopg.connect(pg_database, autocommit=True) as doomed:
        with psycopg.connect(pg_admin_url(), autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (doomed.info.backend_pid,))
        lost = _error(lambda: doomed.execute("SELECT 1"))
        assert postgres_unreachable(lost), repr(lost)


@pytest.mark.postgres
async def test_a_postgres_store_whose_server_went_away_raises_store_unavailable(
    pg_database: str, closed_port: int
) -> None:
    """Reads and writes of an open store whose server is gone (here: the store pointed at
    a port nothing listens on once it is open) raise StoreUnavailableError."""
    store = PostgresStore(pg_database)
    async with store:
        await store.ping()
        # new connections go to a port nothing listens on, as after the server went away
        dialect: Any = store._dialect
        dialect.url = f"postgresql://postgres@127.0.0.1:{closed_port}/postgres"
        with psycopg.connect(pg_admin_url(), autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s"
                " AND pid <> pg_backend_pid()",
                (pg_database.rsplit("/", 1)[1],),
            )
        with pytest.raises(StoreUnavailableWriteError):
            await store.execute("DELETE FROM meta WHERE key = ?", ("nothing",))
        with pytest.raises(StoreUnavailableError):
            await store.ping()


# -- the HTTP layer's view


def test_store_outage_is_found_behind_an_actor_crash_and_in_groups() -> None:
    outage = StoreUnavailableError("the postgres store cannot be reached: refused")
    assert store_outage(outage) is outage
    crashed = ActorCrashed("jobs", outage)
    assert store_outage(crashed) is outage
    grouped = ExceptionGroup("nursery", [ValueError("other"), ActorCrashed("p", outage)])
    assert store_outage(grouped) is outage
    assert store_outage(ActorCrashed("jobs", ValueError("a bug"))) is None
    assert store_outage(RuntimeError("plain")) is None


def test_once_every_limits_a_repeated_line() -> None:
    now = [0.0]
    once = OnceEvery(interval=10, clock=lambda: now[0])
    assert once() and not once() and not once()
    assert once.take_suppressed() == 2 and once.take_suppressed() == 0
    assert once(force=True) and not once()  # forced: goes ahead, starts a new interval
    now[0] = 10.0
    assert once() and once.take_suppressed() == 1
