"""retries: how accurately a job's retry policy keeps its backoff.

    python -m bench.retries [--quick] [--jobs N] [--backoff SEC]

A server with its in-process local agent runs N jobs (``false``) whose retry policy asks
for 2 retries with a backoff of SEC seconds and a factor of 2 (so each job waits SEC, then
2 * SEC), all submitted at once. Figures, from the store (unix ms, one clock): for every
retry, its **lateness**: when the job went back in the queue (the ``retry n: ...`` system
line) minus the due time (the try's end plus the asked backoff), and the **re-placement**
delay: the next ``attempt ... on node`` line minus the due time. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
import urllib.request
from typing import Any

from bench import common

TERMINAL = ("succeeded", "failed", "timeout", "cancelled")


def submit(url: str, body: dict[str, Any]) -> str:
    request = urllib.request.Request(
        url + "/v1/jobs",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(json.loads(answer.read())["job_id"])


def retry_delays(db_path: Any) -> tuple[list[float], list[float], list[float], int]:
    """(asked backoffs, lateness, re-placement delays) in ms, and the retries seen."""
    asked: list[float] = []
    late: list[float] = []
    placed: list[float] = []
    with sqlite3.connect(db_path) as db:
        rows = db.execute("SELECT id, tries FROM jobs WHERE tries IS NOT NULL").fetchall()
        for job_id, tries_json in rows:
            lines = [
                (ts, json.loads(data)["line"])
                for ts, data in db.execute(
                    "SELECT ts, data FROM job_events WHERE job_id = ? AND kind = 'log' "
                    "ORDER BY seq",
                    (job_id,),
                )
                if json.loads(data).get("stream") == "system"
            ]
            for tried in json.loads(tries_json):
                n = tried["try"]
                note = next(line for _, line in lines if line.startswith(f"try {n} "))
                backoff_ms = float(note.rsplit("after a ", 1)[1].split(" s ")[0]) * 1000
                due = tried["finished_at"] + backoff_ms
                back = next(ts for ts, line in lines if line.startswith(f"retry {n}: "))
                again = next(ts for ts, line in lines if f"(try {n + 1}) on node" in line)
                asked.append(backoff_ms)
                late.append(back - due)
                placed.append(again - due)
    return asked, late, placed, len(asked)


def summary(ms: list[float]) -> dict[str, float | None]:
    return {
        "p50_ms": common.pct(ms, 0.5),
        "p99_ms": common.pct(ms, 0.99),
        "max_ms": max(ms) if ms else None,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--backoff", type=int, default=1)
    args = parser.parse_args(argv)
    n = args.jobs or (20 if args.quick else 50)
    started = time.monotonic()
    policy = {"limit": 2, "on": ["failed"], "backoff_sec": args.backoff, "backoff_factor": 2}
    result: dict[str, Any] = {
        "bench": "retries",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "jobs": n,
            "retry": policy,
            "command": ["false"],
            "agent": "in-process local agent (RUNPLANE_LOCAL_AGENT=1), default slots",
            "store": "sqlite (default)",
        },
    }
    with common.server(local_agent=True) as srv:
        body = {"stack": "shell", "command": ["false"], "retry": policy}
        for _ in range(n):
            submit(srv.url.rstrip("/"), body)
        sql = f"SELECT count(*) FROM jobs WHERE phase IN ({','.join('?' * len(TERMINAL))})"
        limit = 60 + n * 3 * args.backoff
        done = common.wait_count(srv.db_path(), sql, TERMINAL, n, limit)
        common.stop(srv.proc)
        asked, late, placed, retries = retry_delays(srv.db_path())
    result.update(
        {
            "terminal": done,
            "retries": retries,
            "asked_backoff_ms": sorted(set(asked)),
            "lateness_ms": summary(late),
            "early": sum(1 for ms in late if ms < 0),
            "replacement_ms": summary(placed),
            "targets": {"no retry before its due time": all(ms >= 0 for ms in late)},
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
