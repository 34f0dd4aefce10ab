"""analytics: ``GET /v1/analytics/jobs`` over a large history, on SQLite and PostgreSQL.

    python -m bench analytics [--quick] [--jobs N] [--skip-postgres]

For each engine: a fresh database migrated through the Store, N finished jobs (default
1,000,000; 100 orgs, spread over 30 days, a quarter each succeeded / failed / timeout /
cancelled) written with one ``INSERT ... SELECT`` from a recursive CTE, the analytics
rollup filled from them (``counts.backfill``, timed), then a ``runplane serve`` on it
(open auth: the anonymous caller sees every org, the heaviest read) answering R requests
of ``window=24h&buckets=48`` and of ``window=30d&buckets=500``: latency p50/p99 (target
p99 < 200 ms on both engines). PostgreSQL as for ``bench store``. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import trio

from bench import common, store
from runplane.jobs import counts
from runplane.persistence import open_store

TARGET_P99_MS = 200.0
SPAN_MS = 30 * 86_400_000

_SEED = """
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < {jobs}),
t(x, c) AS (SELECT x, {now} - (x * CAST(1000003 AS BIGINT)) % {span} FROM n)
INSERT INTO jobs (id, org_id, project, submitted_by, stack, image, phase, priority, mode,
                  seed, spec_hash, spec, event_seq, created_at, updated_at, finished_at)
SELECT 'job_' || x, 'org_' || (x % 100), '', 'u', 'shell', 'img',
       CASE x % 4 WHEN 0 THEN 'succeeded' WHEN 1 THEN 'failed' WHEN 2 THEN 'timeout'
                  ELSE 'cancelled' END,
       100, 'run', 1, 'h', '{{}}', 0, c, c, c + (x * CAST(7919 AS BIGINT)) % 3600000
  FROM t
"""


async def seed(url: str | None, data_dir: Path, jobs: int) -> dict[str, Any]:
    st = open_store(url, data_dir)
    await st.open()
    try:
        now = int(time.time() * 1000) - 3_600_000  # every job ended before now
        t0 = time.perf_counter()
        await st.execute(_SEED.format(jobs=jobs, now=now, span=SPAN_MS))
        seeded = time.perf_counter() - t0
        t1 = time.perf_counter()
        await counts.backfill(st)
        backfill = time.perf_counter() - t1
        rows = await st.fetchone("SELECT COUNT(*) AS n FROM job_counts")
        return {
            "seed_s": round(seeded, 1),
            "backfill_s": round(backfill, 1),
            "rollup_rows": int(rows["n"]) if rows else 0,
        }
    finally:
        await st.close()


def timed(client: httpx.Client, query: str, n: int) -> dict[str, Any]:
    samples = []
    body: dict[str, Any] = {}
    for _ in range(n):
        t0 = time.perf_counter()
        response = client.get(f"/v1/analytics/jobs?{query}")
        samples.append(time.perf_counter() - t0)
        if response.status_code != 200:
            raise RuntimeError(f"{query}: {response.status_code} {response.text[:200]}")
        body = response.json()
    summary = common.latency_summary(samples)
    summary["submitted_total"] = body["summary"]["submitted"]
    summary["p99_ratio"] = common.ratio(summary["p99_ms"], TARGET_P99_MS)
    return summary


def run_engine(url: str | None, jobs: int, requests: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="runplane-bench-analytics-"))
    data_dir = tmp / "data"
    out: dict[str, Any] = trio.run(seed, url, data_dir, jobs)
    env = {"RUNPLANE_DATA_DIR": str(data_dir)}
    if url is not None:
        env["RUNPLANE_DATABASE_URL"] = url
    with common.server(env=env) as srv, httpx.Client(base_url=srv.url, timeout=60) as client:
        timed(client, "window=24h&buckets=48", 3)  # warm-up
        out["24h_48"] = timed(client, "window=24h&buckets=48", requests)
        out["30d_500"] = timed(client, "window=30d&buckets=500", requests)
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--skip-postgres", action="store_true")
    args = parser.parse_args(argv)
    jobs = args.jobs or (100_000 if args.quick else 1_000_000)
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "analytics",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {"jobs": jobs, "orgs": 100, "days": 30, "requests": args.requests},
    }
    result["sqlite"] = run_engine(None, jobs, args.requests)
    with contextlib.ExitStack() as stack:
        admin = os.environ.get("RUNPLANE_TEST_PG_URL", "").strip()
        if not args.skip_postgres and not admin:
            try:
                admin = stack.enter_context(
                    store.pgtest_server(os.environ.get("RUNPLANE_BENCH_PG_DIR") or "/tmp/rp-pg-dev")
                )
            except store.PgtestError as exc:
                result["postgres"] = {"skipped": str(exc)}
        if admin and not args.skip_postgres:
            url = stack.enter_context(store.fresh_database(admin))
            result["postgres"] = run_engine(url, jobs, args.requests)
    worst = [
        result[e][q]["p99_ms"]
        for e in ("sqlite", "postgres")
        if "24h_48" in result.get(e, {})
        for q in ("24h_48", "30d_500")
    ]
    result["worst_p99_ms"] = max(worst)
    result["worst_p99_ratio"] = common.ratio(max(worst), TARGET_P99_MS)
    return common.finish(result, started)


if __name__ == "__main__":
    main()
