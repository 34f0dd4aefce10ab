"""The leader lease and the fencing of a replica's writes (runplane/ha/lease.py,
runplane/persistence/postgres.py ``FENCE_SQL``; docs/operations.md "High availability"),
on the PostgreSQL of scripts/test. Expiry is made by setting the row's end, not by waiting:
these tests read no clock."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from runplane.ha.lease import LeaseClient, LeaseLost
from runplane.persistence.errors import FencedError, WriteBatchError
from runplane.persistence.postgres import Fence, PostgresStore

TTL_MS = 60_000  # long: nothing here expires unless the test says so


@pytest.fixture
def lease_db(pg_database: str, data_dir: Path) -> Iterator[str]:
    """A database with runplane's tables (the lease row's among them)."""
    import trio

    async def migrate() -> None:
        async with PostgresStore(pg_database):
            pass

    trio.run(migrate)
    yield pg_database


def replica(url: str, name: str) -> LeaseClient:
    return LeaseClient(url, name, f"http://{name}:8080", TTL_MS)


def expire(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE ha_lease SET expires_at = 0")


def test_one_replica_takes_the_lease_and_a_dead_leaders_session_frees_it_at_once(
    lease_db: str,
) -> None:
    a, b = replica(lease_db, "a"), replica(lease_db, "b")
    try:
        epoch, row = a.try_take()
        assert (
            epoch == 1 and row is not None and (row.holder, row.address) == ("a", "http://a:8080")
        )
        taken, seen = b.try_take()
        assert taken is None and seen is not None and (seen.holder, seen.epoch) == ("a", 1)
        a.renew()
        # the leader's process dies: its connection ends, and with it the advisory lock
        a._conn.close()  # type: ignore[union-attr]
        epoch, row = b.try_take()
        # the server ends the closed session's backend (and so its lock) a moment after
        # the client hangs up: a loaded machine may need another try
        deadline = time.monotonic() + 10
        while epoch is None and time.monotonic() < deadline:
            time.sleep(0.05)
            epoch, row = b.try_take()
        assert epoch == 2 and row is not None and row.holder == "b" and not row.expired
        with pytest.raises(LeaseLost):
            a.renew()  # its session is gone: it never leads again
    finally:
        a.close()
        b.close()


def test_an_expired_lease_is_taken_and_the_old_leader_cannot_renew(lease_db: str) -> None:
    a, b = replica(lease_db, "a"), replica(lease_db, "b")
    try:
        assert a.try_take()[0] == 1
        assert b.try_take()[0] is None  # alive and in time
        expire(lease_db)  # a was paused past its lease (its session still holds the lock)
        assert b.try_take()[0] == 2
        with pytest.raises(LeaseLost, match="epoch 1 is over"):
            a.renew()
        b.release()  # a clean stop gives it back: the next one takes it at once
        c = replica(lease_db, "c")
        try:
            assert c.try_take()[0] == 3
        finally:
            c.close()
    finally:
        a.close()
        b.close()


async def test_writes_commit_only_under_the_current_epoch(lease_db: str) -> None:
    fence = Fence(idle_timeout_ms=3000)
    fenced: list[bool] = []
    fence.on_fenced = lambda: fenced.append(True)
    insert = "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)"
    async with PostgresStore(lease_db, fence=fence) as store:
        # a replica that never led writes nothing
        with pytest.raises(WriteBatchError) as refused:
            await store.execute(insert, ("ha-test-0", "x", 0))
        assert isinstance(refused.value.cause, FencedError)

        a, b = replica(lease_db, "a"), replica(lease_db, "b")
        try:
            fence.epoch = a.try_take()[0]
            await store.execute(insert, ("ha-test-1", "x", 0))  # the leader writes

            expire(lease_db)
            assert b.try_take()[0] == 2  # another replica took over
            with pytest.raises(WriteBatchError) as late:
                await store.execute(insert, ("ha-test-2", "x", 0))
            assert isinstance(late.value.cause, FencedError), late.value
            assert fenced == [True] and fence.epoch is None
        finally:
            a.close()
            b.close()
        rows = await store.fetchall("SELECT key FROM meta WHERE key LIKE 'ha-test-%' ORDER BY key")
    assert [r["key"] for r in rows] == ["ha-test-1"]
