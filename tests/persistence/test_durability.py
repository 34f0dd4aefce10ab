"""Acknowledged writes survive a crash; the memory store keeps nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import trio

from runplane.persistence import open_store
from runplane.persistence.sqlite import SQLiteStore

CHILD = Path(__file__).with_name("_child.py")


async def test_acknowledged_write_survives_sigkill(
    durable_store_url: str | None, data_dir: Path
) -> None:
    # a child process writes, prints "acked" once the write returned, and is then
    # killed with SIGKILL: no close(), no flush, no atexit
    proc = await trio.to_thread.run_sync(
        lambda: subprocess.Popen(
            [sys.executable, str(CHILD), "ack", durable_store_url or "-", str(data_dir), "k1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    try:
        assert proc.stdout is not None
        with trio.fail_after(60):
            line = await trio.to_thread.run_sync(proc.stdout.readline)
        assert line.strip() == "acked", proc.stderr.read() if proc.stderr else ""
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        await trio.to_thread.run_sync(proc.wait)
    assert proc.returncode == -signal.SIGKILL

    async with open_store(durable_store_url, data_dir) as store:
        row = await store.fetchone("SELECT value FROM meta WHERE key = ?", ("k1",))
        assert row == {"value": "acked"}


async def test_sqlite_file_is_wal_with_full_sync(data_dir: Path) -> None:
    async with open_store(None, data_dir) as store:
        assert isinstance(store, SQLiteStore)
        assert store.path == data_dir / "runplane.db"
        pragmas = await store.transaction(
            lambda tx: (
                tx.fetchone("PRAGMA journal_mode"),
                tx.fetchone("PRAGMA synchronous"),
                tx.fetchone("PRAGMA foreign_keys"),
            )
        )
        assert [next(iter(p.values())) for p in pragmas if p] == ["wal", 2, 1]  # 2 = FULL


async def test_write_acknowledged_then_abandoned_store_is_there_on_reopen(
    durable_store_url: str | None, data_dir: Path
) -> None:
    # the in-process variant of a crash: the store is never closed
    store = open_store(durable_store_url, data_dir)
    await store.open()
    await store.execute(
        "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)", ("k2", "acked", 1)
    )
    async with open_store(durable_store_url, data_dir) as other:
        assert await other.fetchone("SELECT value FROM meta WHERE key = ?", ("k2",)) == {
            "value": "acked"
        }
    await store.close()


async def test_memory_store_loses_everything_on_close(tmp_path: Path) -> None:
    store = open_store("memory", tmp_path / "data")
    assert not store.durable and not store.supports_identity
    async with store:
        await store.execute(
            "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)", ("k", "v", 1)
        )
        assert await store.fetchone("SELECT value FROM meta WHERE key = 'k'") == {"value": "v"}
        # a second memory store in the same process is a separate, empty database
        async with open_store("memory", tmp_path / "data") as other:
            assert await other.fetchall("SELECT * FROM meta") == []
    async with store:  # reopened: a fresh, empty database
        assert await store.fetchall("SELECT * FROM meta") == []
    assert not (tmp_path / "data").exists()  # and it never touched the disk
