"""Group commit: batching, failure isolation, atomic transactions, close, cancellation."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.lowlevel
import trio.testing

from runplane.persistence import Store, TransactionAbortedError, Tx, is_integrity_error, now_ms
from runplane.persistence.sqlite import SQLiteStore

INSERT = "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)"


async def count_meta(store: Store, prefix: str = "") -> int:
    row = await store.fetchone("SELECT count(*) AS n FROM meta WHERE key LIKE ?", (prefix + "%",))
    assert row is not None
    return int(row["n"])


class WriterGate:
    """Holds the writer thread inside a transaction until released.

    Writes submitted meanwhile queue up and are committed together in the next
    batch: a deterministic way to build a batch.
    """

    def __init__(self) -> None:
        self.running = threading.Event()
        self.release = threading.Event()

    def fn(self, tx: Tx) -> str:
        self.running.set()
        assert self.release.wait(30), "gate never released"
        tx.execute(INSERT, ("gate", "1", now_ms()))
        return "gate"

    async def hold(self, store: Store, nursery: trio.Nursery) -> None:
        nursery.start_soon(store.transaction, self.fn)
        await trio.to_thread.run_sync(self.running.wait)


async def test_concurrent_writers_are_batched(store: Store) -> None:
    async def write(i: int) -> None:
        await store.execute(INSERT, (f"w{i:03d}", str(i), now_ms()))

    before = store.statistics()
    async with trio.open_nursery() as nursery:
        for i in range(100):
            nursery.start_soon(write, i)
    after = store.statistics()
    batches = after.batches_committed - before.batches_committed
    assert after.writes_committed - before.writes_committed == 100
    assert 1 <= batches < 100
    assert after.largest_batch > 1
    assert await count_meta(store, "w") == 100


async def test_queued_writes_commit_in_one_batch_without_threads(store: Store) -> None:
    gate = WriterGate()
    async with trio.open_nursery() as nursery:
        await gate.hold(store, nursery)
        before = store.statistics()
        for i in range(500):
            nursery.start_soon(store.execute, INSERT, (f"q{i:03d}", "v", now_ms()))
        await trio.testing.wait_all_tasks_blocked()
        assert store.statistics().pending == 500
        # waiting writes park their task; they hold no worker thread
        assert trio.to_thread.current_default_thread_limiter().borrowed_tokens == 0
        gate.release.set()
    after = store.statistics()
    assert after.pending == 0
    assert after.batches_committed - before.batches_committed == 2  # the gate, then the rest
    assert after.largest_batch == 500
    assert await count_meta(store, "q") == 500


async def test_batch_size_is_capped(tmp_path: Path) -> None:
    async with SQLiteStore(tmp_path / "cap.db", max_batch=10) as store:
        gate = WriterGate()
        async with trio.open_nursery() as nursery:
            await gate.hold(store, nursery)
            for i in range(35):
                nursery.start_soon(store.execute, INSERT, (f"c{i}", "v", now_ms()))
            await trio.testing.wait_all_tasks_blocked()
            gate.release.set()
        stats = store.statistics()
        assert stats.largest_batch == 10
        assert stats.batches_committed == 1 + 4  # gate, then 10 + 10 + 10 + 5
        assert await count_meta(store, "c") == 35


async def test_failing_write_fails_only_its_caller(store: Store) -> None:
    await store.execute(INSERT, ("dup", "original", 1))
    gate = WriterGate()
    results: dict[str, object] = {}

    async def write(key: str) -> None:
        try:
            await store.execute(INSERT, (key, "new", 2))
            results[key] = "ok"
        except Exception as exc:
            results[key] = exc

    class Boom(Exception):
        pass

    def bad_transaction(tx: Tx) -> None:
        tx.execute(INSERT, ("tx_partial", "x", 3))
        raise Boom("rolled back")

    async def run_bad_transaction() -> None:
        try:
            await store.transaction(bad_transaction)
        except Boom as exc:
            results["tx"] = exc

    before = store.statistics()
    async with trio.open_nursery() as nursery:
        await gate.hold(store, nursery)
        for i in range(10):
            nursery.start_soon(write, f"ok{i}")
        nursery.start_soon(write, "dup")  # violates the primary key
        nursery.start_soon(run_bad_transaction)
        for i in range(10, 20):
            nursery.start_soon(write, f"ok{i}")
        await trio.testing.wait_all_tasks_blocked()
        gate.release.set()

    assert is_integrity_error(results["dup"])  # the driver's real exception
    assert isinstance(results["tx"], Exception) and str(results["tx"]) == "rolled back"
    assert all(results[f"ok{i}"] == "ok" for i in range(20))
    after = store.statistics()
    assert after.batches_committed - before.batches_committed == 2
    assert after.largest_batch == 22
    assert after.writes_failed - before.writes_failed == 2
    assert await count_meta(store, "ok") == 20
    assert await store.fetchone("SELECT value FROM meta WHERE key = ?", ("dup",)) == {
        "value": "original"
    }
    assert await count_meta(store, "tx_partial") == 0


async def test_swallowed_database_error_does_not_poison_the_batch(store: Store) -> None:
    # On PostgreSQL an error aborts the transaction even if the function catches
    # it; such a write must fail alone, never commit half, never sink its batch.
    def swallow(tx: Tx) -> str:
        tx.execute(INSERT, ("half", "x", 1))
        with contextlib.suppress(Exception):
            tx.execute("INSERT INTO no_such_table (x) VALUES (?)", (1,))
        return "returned normally"

    gate = WriterGate()
    outcome: list[object] = []

    async def run_swallow() -> None:
        try:
            outcome.append(await store.transaction(swallow))
        except TransactionAbortedError as exc:
            outcome.append(exc)

    async with trio.open_nursery() as nursery:
        await gate.hold(store, nursery)
        nursery.start_soon(store.execute, INSERT, ("before", "v", 1))
        nursery.start_soon(run_swallow)
        nursery.start_soon(store.execute, INSERT, ("after", "v", 1))
        await trio.testing.wait_all_tasks_blocked()
        gate.release.set()

    assert await count_meta(store, "before") == 1
    assert await count_meta(store, "after") == 1
    if store.kind == "postgres":
        assert isinstance(outcome[0], TransactionAbortedError)
        assert await count_meta(store, "half") == 0
    else:  # SQLite keeps the transaction usable after a failed statement
        assert outcome == ["returned normally"]
        assert await count_meta(store, "half") == 1


async def test_lone_write_swallowing_an_error_is_not_reported_committed(store: Store) -> None:
    def swallow(tx: Tx) -> None:
        tx.execute(INSERT, ("lone", "x", 1))
        with contextlib.suppress(Exception):
            tx.execute("INSERT INTO no_such_table (x) VALUES (?)", (1,))

    if store.kind == "postgres":
        with pytest.raises(TransactionAbortedError):
            await store.transaction(swallow)
        assert await count_meta(store, "lone") == 0
    else:
        await store.transaction(swallow)
        assert await count_meta(store, "lone") == 1


async def test_transaction_is_atomic_under_concurrency(store: Store) -> None:
    await store.execute("CREATE TABLE IF NOT EXISTS slots (id TEXT PRIMARY KEY)")

    def take_slot(slot_id: str) -> Callable[[Tx], bool]:
        def fn(tx: Tx) -> bool:
            row = tx.fetchone("SELECT count(*) AS n FROM slots")
            assert row is not None
            if row["n"] >= 10:
                return False
            tx.execute("INSERT INTO slots (id) VALUES (?)", (slot_id,))
            return True

        return fn

    admitted: list[str] = []

    async def contender(i: int) -> None:
        await trio.lowlevel.checkpoint()
        if await store.transaction(take_slot(f"s{i}")):
            admitted.append(f"s{i}")

    async with trio.open_nursery() as nursery:
        for i in range(50):
            nursery.start_soon(contender, i)
    assert len(admitted) == 10
    rows = await store.fetchall("SELECT id FROM slots")
    assert sorted(r["id"] for r in rows) == sorted(admitted)


async def test_close_flushes_pending_writes(durable_store_url: str | None, data_dir: Path) -> None:
    from runplane.persistence import open_store

    store = open_store(durable_store_url, data_dir)
    await store.open()
    gate = WriterGate()
    done: list[int] = []

    async def write(i: int) -> None:
        await store.execute(INSERT, (f"f{i:02d}", "v", now_ms()))
        done.append(i)

    async with trio.open_nursery() as nursery:
        await gate.hold(store, nursery)
        for i in range(50):
            nursery.start_soon(write, i)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(store.close)
        await trio.testing.wait_all_tasks_blocked()
        gate.release.set()
    assert sorted(done) == list(range(50))

    async with open_store(durable_store_url, data_dir) as reopened:
        assert await count_meta(reopened, "f") == 50
        assert await count_meta(reopened, "gate") == 1


async def test_cancelled_while_queued_never_runs(store: Store) -> None:
    gate = WriterGate()
    outcome: list[str] = []

    async def write_then_record(scope: trio.CancelScope) -> None:
        with scope:
            await store.execute(INSERT, ("cancelled", "v", 1))
            outcome.append("returned")
        outcome.append("cancelled" if scope.cancelled_caught else "not cancelled")

    async with trio.open_nursery() as nursery:
        await gate.hold(store, nursery)
        scope = trio.CancelScope()
        nursery.start_soon(write_then_record, scope)
        await trio.testing.wait_all_tasks_blocked()
        assert store.statistics().pending == 1
        scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert store.statistics().pending == 0
        gate.release.set()
    assert outcome == ["cancelled"]
    assert await count_meta(store, "cancelled") == 0
    assert await count_meta(store, "gate") == 1


async def test_cancelled_while_running_completes_and_reports(store: Store) -> None:
    gate = WriterGate()
    outcome: list[object] = []

    async def run(scope: trio.CancelScope) -> None:
        with scope:
            outcome.append(await store.transaction(gate.fn))  # taken by the writer
            await trio.lowlevel.checkpoint()  # the cancellation is delivered here
            outcome.append("not reached")

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(run, scope)
        await trio.to_thread.run_sync(gate.running.wait)
        scope.cancel()
        gate.release.set()
    assert outcome == ["gate"] and scope.cancelled_caught
    assert await count_meta(store, "gate") == 1


@pytest.mark.parametrize(
    "bad_positions",
    [{0}, {19}, {5, 6, 7}, {0, 2, 4, 6, 8, 10, 12, 14, 16, 18}, set(range(20))],
    ids=["first", "last", "consecutive", "every_other", "all"],
)
async def test_failures_anywhere_in_a_batch(store: Store, bad_positions: set[int]) -> None:
    # plain statements are pipelined on PostgreSQL: a failure must be pinned on
    # the right write wherever it sits, and the rest re-sent
    await store.execute(INSERT, ("taken", "v", 1))
    gate = WriterGate()
    results: dict[int, object] = {}

    async def write(i: int) -> None:
        key = "taken" if i in bad_positions else f"p{i:02d}"
        try:
            results[i] = await store.execute(INSERT, (key, str(i), 2))
        except Exception as exc:
            results[i] = exc

    async with trio.open_nursery() as nursery:
        await gate.hold(store, nursery)
        for i in range(20):
            nursery.start_soon(write, i)
            await trio.testing.wait_all_tasks_blocked()  # keep the queue in order
        gate.release.set()
    for i in range(20):
        if i in bad_positions:
            assert is_integrity_error(results[i]), (i, results[i])  # type: ignore[arg-type]
        else:
            assert results[i] == 1, (i, results[i])
    assert await count_meta(store, "p") == 20 - len(bad_positions)
    assert store.statistics().largest_batch == 20


async def test_mixed_statements_and_transactions_in_one_batch(store: Store) -> None:
    gate = WriterGate()
    got: dict[str, object] = {}

    def read_modify_write(tx: Tx) -> int:
        row = tx.fetchone("SELECT count(*) AS n FROM meta WHERE key LIKE 'm%'")
        assert row is not None
        tx.execute(INSERT, (f"t{row['n']}", "v", 3))
        return int(row["n"])

    async def run(name: str, coro_fn: Callable[[], object]) -> None:
        try:
            got[name] = await coro_fn()  # type: ignore[misc]
        except Exception as exc:
            got[name] = exc

    async with trio.open_nursery() as nursery:
        await gate.hold(store, nursery)
        plan: list[tuple[str, Callable[[], object]]] = [
            ("m1", lambda: store.execute(INSERT, ("m1", "v", 1))),
            ("m2", lambda: store.execute(INSERT, ("m2", "v", 1))),
            ("tx1", lambda: store.transaction(read_modify_write)),
            ("m3", lambda: store.execute(INSERT, ("m3", "v", 1))),
            ("bad", lambda: store.execute(INSERT, ("m1", "again", 1))),
            ("many", lambda: store.execute_many(INSERT, [("m4", "v", 1), ("m5", "v", 1)])),
            ("tx2", lambda: store.transaction(read_modify_write)),
        ]
        for name, fn in plan:
            nursery.start_soon(run, name, fn)
            await trio.testing.wait_all_tasks_blocked()
        gate.release.set()
    assert got["m1"] == got["m2"] == got["m3"] == 1
    assert got["tx1"] == 2 and got["tx2"] == 5  # each saw exactly the writes before it
    assert got["many"] == 2
    assert is_integrity_error(got["bad"])  # type: ignore[arg-type]
    assert await count_meta(store, "t") == 2
