"""The Store interface, the same on every backend (sqlite, postgres, memory)."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from runplane.persistence import (
    Store,
    StoreClosedError,
    Tx,
    from_json,
    is_integrity_error,
    now_ms,
    open_store,
    to_json,
)

ITEMS = """
CREATE TABLE IF NOT EXISTS items (
    id         TEXT PRIMARY KEY,
    n          INTEGER NOT NULL,
    doc        TEXT,
    created_ms BIGINT NOT NULL
)
"""


async def make_items(store: Store) -> None:
    await store.execute(ITEMS)


async def test_backend_flags(store: Store) -> None:
    assert store.kind in ("sqlite", "postgres", "memory")
    assert store.durable is (store.kind != "memory")
    assert store.supports_identity is (store.kind != "memory")
    assert store.versions()["sqlite" if store.kind != "postgres" else "postgres"]


async def test_write_read_round_trip(store: Store) -> None:
    await make_items(store)
    ts = now_ms()
    doc = {"b": [1, 2, {"x": None}], "a": "é%?"}
    assert (
        await store.execute(
            "INSERT INTO items (id, n, doc, created_ms) VALUES (?, ?, ?, ?)",
            ("job_1", 7, to_json(doc), ts),
        )
        == 1
    )
    row = await store.fetchone("SELECT id, n, doc, created_ms FROM items WHERE id = ?", ("job_1",))
    assert row == {"id": "job_1", "n": 7, "doc": to_json(doc), "created_ms": ts}
    assert row is not None
    assert from_json(row["doc"]) == doc
    assert isinstance(row["created_ms"], int) and row["created_ms"] > 2**31
    assert await store.fetchone("SELECT id FROM items WHERE id = ?", ("nope",)) is None
    assert await store.fetchall("SELECT id FROM items WHERE n > ?", (100,)) == []


async def test_rowcount_and_execute_many(store: Store) -> None:
    await make_items(store)
    rows = [(f"i{k:03d}", k, None, now_ms()) for k in range(100)]
    assert (
        await store.execute_many(
            "INSERT INTO items (id, n, doc, created_ms) VALUES (?, ?, ?, ?)", rows
        )
        == 100
    )
    assert await store.execute_many("INSERT INTO items (id, n) VALUES (?, ?)", []) == 0
    assert await store.execute("UPDATE items SET n = n + 1000 WHERE n < ?", (10,)) == 10
    assert await store.execute("DELETE FROM items WHERE n >= ?", (1000,)) == 10
    got = await store.fetchall("SELECT id, n FROM items ORDER BY n LIMIT 3")
    assert got == [{"id": "i010", "n": 10}, {"id": "i011", "n": 11}, {"id": "i012", "n": 12}]


async def test_portable_placeholders_and_literals(store: Store) -> None:
    # '?' inside literals stays, a literal '%' needs no escaping by the caller
    row = await store.fetchone(
        "SELECT ? AS a, '50%' AS b, 'what?' AS c, 'it''s ?' AS d -- trailing ? comment %\n",
        ("x",),
    )
    assert row == {"a": "x", "b": "50%", "c": "what?", "d": "it's ?"}
    await make_items(store)
    await store.execute(
        "INSERT INTO items (id, n, created_ms) VALUES (?, ?, ?)", ("100%", 1, now_ms())
    )
    like = await store.fetchall("SELECT id FROM items WHERE id LIKE '%\\%%' ESCAPE '\\'")
    assert like == [{"id": "100%"}]


async def test_upsert_on_conflict(store: Store) -> None:
    upsert = (
        "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at"
    )
    await store.execute(upsert, ("channel_targets", to_json({"slack": "#ops"}), 1))
    await store.execute(upsert, ("channel_targets", to_json({"slack": "#alerts"}), 2))
    ignored = await store.execute(
        "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING",
        ("channel_targets", "{}", 3),
    )
    assert ignored == 0
    row = await store.fetchone(
        "SELECT value, updated_at FROM meta WHERE key = ?", ("channel_targets",)
    )
    assert row is not None
    assert from_json(row["value"]) == {"slack": "#alerts"} and row["updated_at"] == 2


async def test_integrity_error_is_the_drivers_and_detectable(store: Store) -> None:
    await store.execute("INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)", ("k", "v", 1))
    with pytest.raises(Exception) as info:
        await store.execute(
            "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)", ("k", "v2", 2)
        )
    assert is_integrity_error(info.value)
    assert not is_integrity_error(ValueError("x"))
    # the store goes on working
    assert await store.fetchone("SELECT value FROM meta WHERE key = ?", ("k",)) == {"value": "v"}


async def test_transaction_returns_value_and_reads_its_writes(store: Store) -> None:
    def fn(tx: Tx) -> int:
        tx.execute("INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)", ("a", "1", 1))
        tx.execute_many(
            "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)",
            [("b", "2", 1), ("c", "3", 1)],
        )
        row = tx.fetchone("SELECT count(*) AS n FROM meta")
        assert row is not None
        return int(row["n"]) + len(tx.fetchall("SELECT key FROM meta"))

    assert await store.transaction(fn) == 6


async def test_transaction_exception_rolls_back_and_reraises(store: Store) -> None:
    class Boom(Exception):
        pass

    def fn(tx: Tx) -> None:
        tx.execute("INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)", ("x", "1", 1))
        raise Boom("no")

    with pytest.raises(Boom, match="no"):
        await store.transaction(fn)
    assert await store.fetchall("SELECT key FROM meta") == []


async def test_statistics(store: Store) -> None:
    before = store.statistics()
    for i in range(3):
        await store.execute(
            "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)", (str(i), "v", 1)
        )
    after = store.statistics()
    assert after.writes_committed == before.writes_committed + 3
    assert after.batches_committed == before.batches_committed + 3  # one at a time
    assert after.pending == 0 and after.largest_batch >= 1


async def test_concurrent_reads_and_writes(store: Store) -> None:
    await make_items(store)
    seen: list[int] = []

    async def writer(k: int) -> None:
        await store.execute(
            "INSERT INTO items (id, n, created_ms) VALUES (?, ?, ?)", (f"w{k}", k, now_ms())
        )

    async def reader() -> None:
        row = await store.fetchone("SELECT count(*) AS c FROM items")
        assert row is not None
        seen.append(int(row["c"]))

    async with trio.open_nursery() as nursery:
        for k in range(200):
            nursery.start_soon(writer, k)
            nursery.start_soon(reader)
    assert len(seen) == 200 and all(0 <= c <= 200 for c in seen)
    assert await store.fetchone("SELECT count(*) AS c FROM items") == {"c": 200}


async def test_closed_store_refuses(store_url: str | None, data_dir: Path) -> None:
    store = open_store(store_url, data_dir)
    with pytest.raises(StoreClosedError):
        await store.execute("SELECT 1")
    async with store:
        assert await store.fetchone("SELECT 1 AS one") == {"one": 1}
    with pytest.raises(StoreClosedError):
        await store.execute("DELETE FROM meta")
    with pytest.raises(StoreClosedError):
        await store.fetchall("SELECT * FROM meta")
    with pytest.raises(StoreClosedError):
        await store.transaction(lambda tx: None)
    await store.close()  # idempotent


@pytest.mark.postgres
async def test_postgres_connections_lost_are_replaced(pg_database: str, data_dir: Path) -> None:
    import psycopg

    async with open_store(pg_database, data_dir) as store:
        insert = "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)"
        await store.execute(insert, ("before", "v", 1))
        assert await store.fetchone("SELECT count(*) AS n FROM meta") == {"n": 1}
        # the server drops every connection of the store (restart, failover, idle kill)
        with psycopg.connect(pg_database, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT count(pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert killed is not None and killed[0] >= 2  # the writer and a reader
        # neither the next write nor the next read sees it
        await store.execute(insert, ("after", "v", 2))
        assert await store.fetchone("SELECT count(*) AS n FROM meta") == {"n": 2}
