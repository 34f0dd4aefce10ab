"""scale: does a request cost the same with a big queue and a long history?

    python -m bench.scale [--quick] [--queued 100000] [--finished 1000000] [--lines 1000000]

One SQLite data dir, three servers in turn:

1. ``empty``: a fresh store. Measured (``measure``): ``GET /healthz`` and ``POST /v1/jobs``
   rates (50 connections; the submitted jobs ask for more than any agent has, so they
   stay queued) with the server's CPU per request; ``GET /v1/jobs?paginate=1``
   first page and a deep cursor page (the middle of the history), 100 requests each on
   one connection; placement: 10 simulated agents connected and 100 probe jobs paced at
   20/s, submit -> assigned p50/p99 from the store and the mean planning round from
   ``/metrics``; server RSS.
2. ``scaled``: ``--finished`` finished jobs written straight into the store with the
   server stopped (one ``INSERT ... SELECT``; the rollup is rebuilt at start), then
   ``--queued`` jobs submitted through ``POST /v1/jobs/batch`` (1,000 per request) that
   ask for 64 cores, which no agent has, so they stay queued; RSS before and after them
   gives the server's memory per queued job. Then ``measure`` again.
3. ``retention``: ``--lines`` log lines written into 1,000 of the finished jobs, which
   ended 40 days ago; a server with ``RUNPLANE_RETENTION_DAYS=30`` and a sweep every
   second deletes them while ``POST /v1/jobs`` runs at 50 connections (once the server's
   start-up rebuild is done): lines deleted/s, the submit rate meanwhile against the same
   load on the same server once the purge is over, the store's pages and free pages
   before and after.

Targets: each figure within 20 % of ``empty``; RSS < 2 KB per queued job. Prints ONE JSON
object.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import common
from runplane.jobs.repo import encode_cursor

#: queued jobs that fit no simulated agent (8 cores): they stay queued
BIG = {"stack": "shell", "command": ["true"], "project": "big", "limits": {"cpu_cores": 64}}
SUBMIT = json.dumps({**BIG, "project": "bench"})
PROBE = json.dumps({"stack": "shell", "command": ["true"], "project": "probe"})
DAY_MS = 24 * 3600 * 1000


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def post(url: str, body: Any) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def scrape(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, _, value = line.partition(" ")
            out[name] = float(value)
    return out


def store_pages(db: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        size = conn.execute("PRAGMA page_size").fetchone()[0]
    return {"pages": pages, "free_pages": free, "bytes": pages * size}


def deep_cursor(db: Path) -> str:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        total = conn.execute("SELECT count(*) FROM jobs").fetchone()[0]
        row = conn.execute(
            "SELECT id FROM jobs ORDER BY id DESC LIMIT 1 OFFSET ?", (total // 2,)
        ).fetchone()
    return encode_cursor(row[0])


def latency(srv: common.Server, path: str, n: int = 100) -> dict[str, Any]:
    load = common.http_load(srv.pid, srv.port, path=path, connections=1, count=n, seconds=60)
    return {k: load["latency"][k] for k in ("p50_ms", "p99_ms")}


def measure(srv: common.Server, db: Path, seconds: float) -> dict[str, Any]:
    healthz = common.http_load(srv.pid, srv.port, connections=50, seconds=seconds)
    submit = common.http_load(
        srv.pid, srv.port, path="/v1/jobs", method="POST", body=SUBMIT, seconds=seconds
    )
    pages = {
        "first": latency(srv, "/v1/jobs?paginate=1&limit=50"),
        "deep": latency(srv, f"/v1/jobs?paginate=1&limit=50&cursor={deep_cursor(db)}"),
    }
    before = scrape(srv.url)
    since = int(time.time() * 1000)
    agents = common.spawn(
        [
            "bench.simagents",
            "--port",
            str(srv.port),
            "--agents",
            "10",
            "--mode",
            "complete",
            "--seconds",
            "60",
        ]
    )
    try:
        common.read_json_line(agents, 60)  # ready
        time.sleep(1.0)
        probe = common.http_load(
            srv.pid,
            srv.port,
            path="/v1/jobs",
            method="POST",
            body=PROBE,
            connections=1,
            count=100,
            rate=20,
            seconds=60,
        )
        time.sleep(1.0)
    finally:
        common.stop(agents)
    after = scrape(srv.url)
    plans = after["runplane_placement_decisions_total"] - before.get(
        "runplane_placement_decisions_total", 0
    )
    plan_s = after["runplane_placement_decision_seconds_total"] - before.get(
        "runplane_placement_decision_seconds_total", 0
    )
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT j.created_at, MIN(e.ts) FROM jobs j JOIN job_events e ON e.job_id = j.id "
            "WHERE j.project = 'probe' AND j.created_at >= ? AND e.kind = 'phase' "
            "AND e.data LIKE '%\"assigned\"%' GROUP BY j.id",
            (since,),
        ).fetchall()
    to_assigned = [(ts - created) / 1000 for created, ts in rows]
    return {
        "healthz_rps": healthz["rps"],
        "healthz_cpu_us": healthz.get("server_cpu_us_per_request"),
        "submit_jobs_per_s": round(submit["statuses"].get("202", 0) / submit["seconds"], 1),
        "submit_cpu_us": submit.get("server_cpu_us_per_request"),
        "page_ms": pages,
        "placement": {
            "probe_jobs": probe["statuses"],
            "submit_to_assigned": common.latency_summary(to_assigned),
            "plans": plans,
            "mean_plan_us": round(plan_s / plans * 1e6, 1) if plans else None,
        },
        "rss_kb": rss_kb(srv.pid),
    }


def fill_finished(db: Path, n: int, lines: int) -> dict[str, Any]:
    """``n`` finished jobs copied from a template row (ids that sort before every real
    one), 1,000 of them ended 40 days ago with ``lines`` log lines among them; the
    rollup cleared so the next server rebuilds it."""
    began = time.monotonic()
    with sqlite3.connect(db) as conn:
        columns = [r[1] for r in conn.execute("PRAGMA table_info(jobs)")]
        template = conn.execute(
            "SELECT id FROM jobs WHERE phase = 'cancelled' ORDER BY id LIMIT 1"
        ).fetchone()[0]
        now = int(time.time() * 1000)
        old = now - 40 * DAY_MS
        override = {
            "id": "'job_00' || printf('%024d', i)",
            "phase": "'succeeded'",
            "created_at": f"CASE WHEN i <= 1000 THEN {old} - 60000 ELSE {now} - i END",
            "finished_at": f"CASE WHEN i <= 1000 THEN {old} ELSE {now} - i END",
            "updated_at": str(now),
            "idempotency_key": "NULL",
            "idempotency_hash": "NULL",
            "purged_at": "NULL",
            "array_id": "NULL",
            "array_index": "NULL",
        }
        select = ", ".join(override.get(c, f"t.{c}") for c in columns)
        conn.execute(
            f"WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
            f"INSERT INTO jobs ({', '.join(columns)}) SELECT {select} FROM k, jobs t "
            "WHERE t.id = ?",
            (n, template),
        )
        per_job = max(1, lines // 1000)
        conn.execute(
            "WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
            "INSERT INTO job_events (job_id, seq, kind, ts, data) "
            "SELECT 'job_00' || printf('%024d', 1 + (i - 1) / ?), 100 + (i - 1) % ?, 'log', "
            '?, \'{"stream":"stdout","line":"a line of an old run, long enough to count"}\' '
            "FROM k",
            (per_job * 1000, per_job, per_job, old),
        )
        conn.execute(
            "UPDATE jobs SET event_seq = ? WHERE id <= 'job_00' || printf('%024d', 1000)",
            (100 + per_job,),
        )
        conn.execute("DELETE FROM job_counts")
    return {"seconds": round(time.monotonic() - began, 1), "lines": per_job * 1000}


def wait_rebuilt(srv: common.Server, limit: float = 120.0) -> None:
    """Until the server's placement has rebuilt its queue from the store."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if any(r.get("msg") == "placement rebuilt from the store" for r in srv.log_lines()):
            return
        time.sleep(0.1)


def queue_big(srv: common.Server, n: int) -> float:
    began = time.monotonic()
    batch = {"jobs": [BIG] * 1000}
    for _ in range(n // 1000):
        post(srv.url.rstrip("/") + "/v1/jobs/batch", batch)
    return round(n / (time.monotonic() - began), 1)


def within(value: float | None, base: float | None, *, higher_is_better: bool) -> bool | None:
    if value is None or base is None or base == 0:
        return None
    return value >= 0.8 * base if higher_is_better else value <= 1.2 * base


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20k queued, 200k finished")
    parser.add_argument("--queued", type=int, default=None)
    parser.add_argument("--finished", type=int, default=None)
    parser.add_argument("--lines", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    args = parser.parse_args(argv)
    queued = args.queued or (20_000 if args.quick else 100_000)
    finished = args.finished or (200_000 if args.quick else 1_000_000)
    lines = args.lines or (200_000 if args.quick else 1_000_000)
    seconds = args.seconds or (3.0 if args.quick else 5.0)
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "scale",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "queued": queued,
            "finished": finished,
            "expired_lines": lines,
            "seconds": seconds,
            "store": "sqlite (default; WAL, synchronous=FULL)",
        },
    }
    tmp = Path(tempfile.mkdtemp(prefix="runplane-scale-"))
    data = tmp / "data"
    db = data / "runplane.db"
    env = {"RUNPLANE_DATA_DIR": str(data), "RUNPLANE_RETENTION_DAYS": "0"}
    try:
        with common.server(env=env) as srv:
            url = srv.url.rstrip("/")
            job = post(url + "/v1/jobs", {"stack": "shell", "command": ["true"]})
            post(url + f"/v1/jobs/{job['job_id']}/cancel", {})
            empty = measure(srv, db, seconds)
        fill = fill_finished(db, finished, lines)
        with common.server(env=env) as srv:
            time.sleep(2.0)
            rss_before = rss_kb(srv.pid)
            queue_rate = queue_big(srv, queued)
            time.sleep(2.0)
            rss_after = rss_kb(srv.pid)
            scaled = measure(srv, db, seconds)
        per_queued = round((rss_after - rss_before) * 1024 / queued)
        pages_before = store_pages(db)
        retention_env = {
            **env,
            "RUNPLANE_RETENTION_DAYS": "30",
            "RUNPLANE_RETENTION_SWEEP_SEC": "1",
        }
        with common.server(env=retention_env) as srv:
            began = time.monotonic()
            wait_rebuilt(srv)  # start-up work is not the janitor's
            during = common.http_load(
                srv.pid, srv.port, path="/v1/jobs", method="POST", body=SUBMIT, seconds=seconds
            )
            left = common.wait_count(
                db,
                "SELECT count(*) = 0 FROM job_events WHERE kind = 'log' AND ts < ?",
                (int(time.time() * 1000) - 30 * DAY_MS,),
                1,
                600,
            )
            purge_s = time.monotonic() - began
            after = common.http_load(
                srv.pid, srv.port, path="/v1/jobs", method="POST", body=SUBMIT, seconds=seconds
            )
        pages_after = store_pages(db)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    during_rate = round(during["statuses"].get("202", 0) / during["seconds"], 1)
    after_rate = round(after["statuses"].get("202", 0) / after["seconds"], 1)
    result.update(
        {
            "empty": empty,
            "scaled": scaled,
            "fill": {**fill, "queued_per_s": queue_rate},
            "rss_per_queued_job_bytes": per_queued,
            "retention": {
                "lines": fill["lines"],
                "purged": bool(left),
                "seconds": round(purge_s, 1),
                "lines_per_s": round(fill["lines"] / purge_s) if left else None,
                "submit_jobs_per_s_during": during_rate,
                "submit_jobs_per_s_after": after_rate,
                "store_before": pages_before,
                "store_after": pages_after,
            },
            "ratios": {
                "healthz": common.ratio(scaled["healthz_rps"], empty["healthz_rps"]),
                "submit": common.ratio(scaled["submit_jobs_per_s"], empty["submit_jobs_per_s"]),
                "submit_during_purge": common.ratio(during_rate, after_rate),
                "page_first_p50": common.ratio(
                    scaled["page_ms"]["first"]["p50_ms"], empty["page_ms"]["first"]["p50_ms"]
                ),
                "page_deep_p50": common.ratio(
                    scaled["page_ms"]["deep"]["p50_ms"], empty["page_ms"]["deep"]["p50_ms"]
                ),
                "assigned_p50": common.ratio(
                    scaled["placement"]["submit_to_assigned"]["p50_ms"],
                    empty["placement"]["submit_to_assigned"]["p50_ms"],
                ),
            },
        }
    )
    result["targets"] = {
        "healthz within 20%": within(
            scaled["healthz_rps"], empty["healthz_rps"], higher_is_better=True
        ),
        "submit within 20%": within(
            scaled["submit_jobs_per_s"], empty["submit_jobs_per_s"], higher_is_better=True
        ),
        "page first within 20%": within(
            scaled["page_ms"]["first"]["p50_ms"],
            empty["page_ms"]["first"]["p50_ms"],
            higher_is_better=False,
        ),
        "page deep within 20%": within(
            scaled["page_ms"]["deep"]["p50_ms"],
            empty["page_ms"]["deep"]["p50_ms"],
            higher_is_better=False,
        ),
        "placement within 20%": within(
            scaled["placement"]["submit_to_assigned"]["p50_ms"],
            empty["placement"]["submit_to_assigned"]["p50_ms"],
            higher_is_better=False,
        ),
        "rss < 2 KB per queued job": per_queued < 2048,
    }
    return common.finish(result, started)


if __name__ == "__main__":
    main()
