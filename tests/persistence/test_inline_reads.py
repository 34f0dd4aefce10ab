"""Point reads on the SQLite file run in the event loop thread, and fall back to a worker
thread when SQLite would make them wait."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.persistence import open_store
from runplane.persistence.sqlite import SQLiteDialect


async def test_fetchone_does_not_need_a_worker_thread(tmp_path: Path) -> None:
    store = open_store(None, tmp_path)
    async with store:
        await store.execute("INSERT INTO meta (key, value, updated_at) VALUES ('k', 'v1', 1)")
        limiter: trio.CapacityLimiter = store._read_limiter  # type: ignore[attr-defined]
        held = [object() for _ in range(int(limiter.total_tokens))]
        for token in held:  # every worker-thread read slot taken
            await limiter.acquire_on_behalf_of(token)
        try:
            with trio.fail_after(5):
                row = await store.fetchone("SELECT value FROM meta WHERE key = ?", ("k",))
            assert row == {"value": "v1"}
            # a committed write is visible to the next inline read at once
            await store.execute("UPDATE meta SET value = 'v2' WHERE key = 'k'")
            row = await store.fetchone("SELECT value FROM meta WHERE key = ?", ("k",))
            assert row == {"value": "v2"}
            with trio.move_on_after(1) as waited:  # fetchall still goes to a thread
                await store.fetchall("SELECT value FROM meta")
            assert waited.cancelled_caught
        finally:
            for token in held:
                limiter.release_on_behalf_of(token)


def test_a_busy_inline_read_gives_way_and_other_errors_raise(tmp_path: Path) -> None:
    dialect = SQLiteDialect(tmp_path / "x.db")
    dialect.open_readers(None)

    def locked(conn: Any) -> Any:
        raise sqlite3.OperationalError("database is locked")

    def broken(conn: Any) -> Any:
        raise sqlite3.OperationalError("no such table: nope")

    try:
        assert dialect.run_inline_read(locked) == (False, None)
        with pytest.raises(sqlite3.OperationalError, match="no such table"):
            dialect.run_inline_read(broken)
        assert dialect.run_inline_read(lambda conn: conn.execute("SELECT 1 AS one").fetchone())[
            1
        ] == {"one": 1}
    finally:
        dialect.close_readers()
