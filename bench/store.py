"""Commit throughput through the Store interface, on SQLite and PostgreSQL.

    python -m bench.store [--seconds 3] [--skip-postgres]

For each backend, on a fresh database, each phase time-bounded:

* ``single``: one writer, one acknowledged single-row INSERT at a time (writes/s);
* ``concurrent``: 100 trio tasks each writing single rows (group commit; writes/s,
  and the batches that carried them);
* ``batched``: one writer, ``execute_many`` of 100 rows per call (rows/s).

PostgreSQL: ``RUNPLANE_TEST_PG_URL`` if set, else a server started with
``scripts/pgtest start .pgtest`` (stopped afterwards if this run started it; pgtest
picks a free port, so it does not collide with another server).
Prints ONE JSON object. Total time stays under a minute at the default 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import trio

from runplane.persistence import Store, now_ms, open_store

REPO = Path(__file__).resolve().parent.parent
CONCURRENCY = 100
BATCH_ROWS = 100
TABLE = (
    "CREATE TABLE IF NOT EXISTS bench_rows ("
    " id TEXT PRIMARY KEY, n BIGINT NOT NULL, payload TEXT NOT NULL, created_ms BIGINT NOT NULL)"
)
INSERT = "INSERT INTO bench_rows (id, n, payload, created_ms) VALUES (?, ?, ?, ?)"
PAYLOAD = json.dumps({"phase": "running", "node": "node_01", "attempt": 1, "pad": "x" * 64})


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def next_id(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n:09d}"


async def phase_single(store: Store, seconds: float, ids: Counter) -> dict[str, Any]:
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    writes = 0
    while time.perf_counter() < deadline:
        await store.execute(INSERT, (ids.next_id("s"), writes, PAYLOAD, now_ms()))
        writes += 1
    elapsed = time.perf_counter() - start
    return {"writes": writes, "seconds": round(elapsed, 3), "writes_per_s": round(writes / elapsed)}


async def phase_concurrent(store: Store, seconds: float, ids: Counter) -> dict[str, Any]:
    before = store.statistics()
    writes = 0
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + seconds

    async def writer() -> None:
        nonlocal writes
        while time.perf_counter() < deadline:
            t0 = time.perf_counter()
            await store.execute(INSERT, (ids.next_id("c"), writes, PAYLOAD, now_ms()))
            latencies.append(time.perf_counter() - t0)
            writes += 1

    async with trio.open_nursery() as nursery:
        for _ in range(CONCURRENCY):
            nursery.start_soon(writer)
    elapsed = time.perf_counter() - start
    after = store.statistics()
    batches = after.batches_committed - before.batches_committed
    latencies.sort()
    return {
        "writers": CONCURRENCY,
        "writes": writes,
        "seconds": round(elapsed, 3),
        "writes_per_s": round(writes / elapsed),
        "batches": batches,
        "mean_batch": round(writes / batches, 1) if batches else None,
        "largest_batch": after.largest_batch,
        "latency_ms_p50": round(latencies[len(latencies) // 2] * 1000, 2),
        "latency_ms_p99": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
    }


async def phase_batched(store: Store, seconds: float, ids: Counter) -> dict[str, Any]:
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    rows = 0
    while time.perf_counter() < deadline:
        batch = [(ids.next_id("b"), rows + k, PAYLOAD, now_ms()) for k in range(BATCH_ROWS)]
        await store.execute_many(INSERT, batch)
        rows += BATCH_ROWS
    elapsed = time.perf_counter() - start
    return {
        "rows_per_call": BATCH_ROWS,
        "rows": rows,
        "seconds": round(elapsed, 3),
        "rows_per_s": round(rows / elapsed),
    }


async def run_backend(url: str | None, data_dir: Path, seconds: float) -> dict[str, Any]:
    async with open_store(url, data_dir) as store:
        await store.execute(TABLE)
        ids = Counter()
        single = await phase_single(store, seconds, ids)
        concurrent = await phase_concurrent(store, seconds, ids)
        batched = await phase_batched(store, seconds, ids)
        row = await store.fetchone("SELECT count(*) AS n FROM bench_rows")
        assert row is not None
        expected = single["writes"] + concurrent["writes"] + batched["rows"]
        assert row["n"] == expected, (row, expected)  # every acknowledged write is there
        return {
            "single_writes_per_s": single["writes_per_s"],
            "concurrent_100_writes_per_s": concurrent["writes_per_s"],
            "batched_rows_per_s": batched["rows_per_s"],
            "phases": {"single": single, "concurrent": concurrent, "batched": batched},
            "versions": store.versions(),
        }


class PgtestError(RuntimeError):
    """``scripts/pgtest start`` failed; the message ends with its stderr."""


@contextmanager
def pgtest_server(pg_dir: Path | str) -> Iterator[str]:
    """The URL of the ``scripts/pgtest`` server in ``pg_dir``, started if it is not running
    and then stopped on the way out; one that was already running is left running."""
    script = str(REPO / "scripts" / "pgtest")
    was_running = (
        subprocess.run(
            [script, "status", str(pg_dir)], capture_output=True, text=True, check=False
        ).returncode
        == 0
    )
    out = subprocess.run(
        [script, "start", str(pg_dir)], capture_output=True, text=True, timeout=300, check=False
    )
    url = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    if out.returncode != 0 or not url.startswith("postgresql://"):
        raise PgtestError(f"scripts/pgtest start {pg_dir} failed: {out.stderr.strip()[-300:]}")
    try:
        yield url
    finally:
        if not was_running:
            subprocess.run([script, "stop", str(pg_dir)], check=False, capture_output=True)


@contextmanager
def postgres_server(skip: bool) -> Iterator[str | None]:
    """The URL of a PostgreSQL server to use: the test one, or one we start (and stop)."""
    if skip:
        yield None
        return
    url = os.environ.get("RUNPLANE_TEST_PG_URL", "").strip()
    if url:
        yield url
        return
    with pgtest_server(REPO / ".pgtest") as url:
        yield url


@contextmanager
def fresh_database(admin_url: str) -> Iterator[str]:
    import psycopg

    name = f"rp_bench_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    parts = urlsplit(admin_url)
    try:
        yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of each phase")
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args()

    started = time.perf_counter()
    result: dict[str, Any] = {
        "bench": "store",
        "phase_seconds": args.seconds,
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "sqlite": sqlite3.sqlite_version,
        },
    }
    tmp = Path(tempfile.mkdtemp(prefix="runplane-bench-"))
    try:
        result["sqlite"] = trio.run(run_backend, None, tmp / "data", args.seconds)
        result["sqlite"]["durability"] = "WAL, synchronous=FULL (fsync per commit)"
        with postgres_server(args.skip_postgres) as admin_url:
            if admin_url is not None:
                with fresh_database(admin_url) as url:
                    result["postgres"] = trio.run(run_backend, url, tmp, args.seconds)
                    result["postgres"]["durability"] = "synchronous_commit=on"
                    result["machine"]["postgres"] = result["postgres"]["versions"].get("postgres")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["total_seconds"] = round(time.perf_counter() - started, 1)
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
