"""schedules: the scheduler's firing delay, an occurrence's due time -> its job's row.

    python -m bench.schedules [--quick] [--schedules N] [--firings M]

``runplane serve`` (no agent: the jobs queue) with N schedules of ``every: 1s``, created a
moment apart over HTTP; the scenario waits until M occurrences created a job, then stops
the server and reads, from the store (one clock, unix ms), each occurrence's ``due_at``
and its job's ``created_at``. Figures: the delay p50/p99/max over the M firings, and
whether any occurrence fired twice (two runs for one due time, or one job for two).
Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
import urllib.request
from typing import Any

from bench import common


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return dict(json.loads(answer.read()))


def firings(db_path: Any) -> list[tuple[str, int, int, str]]:
    """(schedule, due_at, job created_at, job id) of every occurrence that created a job."""
    with sqlite3.connect(db_path) as db:
        rows = db.execute(
            "SELECT r.schedule_id, r.due_at, j.created_at, j.id FROM schedule_runs r"
            " JOIN jobs j ON j.id = r.ref WHERE r.outcome = 'created' ORDER BY r.due_at"
        ).fetchall()
    return [(str(s), int(d), int(c), str(j)) for s, d, c, j in rows]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--schedules", type=int, default=10)
    parser.add_argument("--firings", type=int, default=100)
    args = parser.parse_args(argv)
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "schedules",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "schedules": args.schedules,
            "every": "1s",
            "firings": args.firings,
            "job": {"stack": "shell", "command": ["true"]},
            "agent": "none (the jobs queue)",
            "store": "sqlite (default)",
        },
    }
    with common.server() as srv:
        base = srv.url.rstrip("/")
        body = {"stack": "shell", "command": ["true"]}
        for i in range(args.schedules):
            post(base + "/v1/schedules", {"name": f"s{i}", "every": "1s", "job": body})
            time.sleep(1.0 / args.schedules)  # spread the due times over the second
        sql = "SELECT count(*) FROM schedule_runs WHERE outcome = 'created'"
        seen = common.wait_count(srv.db_path(), sql, (), args.firings, 60 + args.firings)
        common.stop(srv.proc)
        fired = firings(srv.db_path())[: args.firings]
    delays = [created - due for _, due, created, _ in fired]
    pairs = [(s, d) for s, d, _, _ in fired]
    result.update(
        {
            "firings": len(fired),
            "seen": seen,
            "firing_delay_ms": {
                "p50_ms": common.pct(delays, 0.5),
                "p99_ms": common.pct(delays, 0.99),
                "max_ms": max(delays) if delays else None,
                "min_ms": min(delays) if delays else None,
            },
            "fired_twice": len(pairs) - len(set(pairs)),
            "jobs_shared": len(fired) - len({j for *_, j in fired}),
            "targets": {
                "every occurrence fired once": len(pairs) == len(set(pairs)),
                "none before its due time": all(d >= 0 for d in delays),
            },
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
