"""batch_submit: sustained ``POST /v1/jobs/batch`` (job arrays) on the default SQLite store.

    python -m bench.batch_submit [--quick] [--batch 100] [--connections 4] [--seconds 10]

No node is connected, so every job stays queued: this measures a batch's planning,
admission (one ask for every slot), one transaction for all its rows and the 202. Each
request carries ``--batch`` SubmitJobBody items (``{"stack":"shell","command":["true"]}``
with its own seed), from ``--connections`` keep-alive connections (``bench.httpload``, its
own process). Figures: durable jobs accepted/s (202s x batch / s), request latency
p50/p99, server CPU per job, rows stored. Also one sweep of 1,000 (a 10 x 10 x 10 grid)
timed alone. Target: >= 10,000 jobs/s in batches of 100. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
import urllib.request
from typing import Any

from bench import common


def batch_body(n: int) -> str:
    items = [
        {"stack": "shell", "command": ["true"], "seed": i, "project": "bench"} for i in range(n)
    ]
    return json.dumps({"jobs": items})


SWEEP = json.dumps(
    {
        "job": {"stack": "sim-cartpole", "project": "sweep"},
        "sweep": {
            "episodes": list(range(1, 11)),
            "max_steps": [10 * i for i in range(1, 11)],
            "epsilon": [i / 10 for i in range(10)],
        },
    }
)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a 4 s phase")
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument(
        "--lean-lanes",
        choices=("on", "off"),
        default="on",
        help="the lean lanes (docs/lean-lanes.md): on, as shipped; off: Quart answers all",
    )
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=None)
    args = parser.parse_args(argv)
    seconds = args.seconds or (4.0 if args.quick else 10.0)
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "batch_submit",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "lean_lanes": args.lean_lanes,
            "batch": args.batch,
            "connections": args.connections,
            "seconds": seconds,
            "warmup_seconds": 1.0,
            "store": "sqlite (default; WAL, synchronous=FULL)",
            "nodes": 0,
        },
    }
    with common.server(env=common.lanes_env(args.lean_lanes)) as srv:
        load = common.http_load(
            srv.pid,
            srv.port,
            path="/v1/jobs/batch",
            method="POST",
            body=batch_body(args.batch),
            connections=args.connections,
            seconds=seconds,
        )
        request = urllib.request.Request(
            f"{srv.url.rstrip('/')}/v1/jobs/batch",
            data=SWEEP.encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        began = time.perf_counter()
        with urllib.request.urlopen(request, timeout=120) as response:
            sweep = json.loads(response.read())
        sweep_ms = (time.perf_counter() - began) * 1000
        common.stop(srv.proc)
        with sqlite3.connect(srv.db_path()) as db:
            stored = db.execute("SELECT count(*), count(DISTINCT array_id) FROM jobs").fetchone()
    accepted = load["statuses"].get("202", 0)
    jobs_per_s = round(accepted * args.batch / load["seconds"], 1)
    cpu_us = load.get("server_cpu_us_per_request")
    result.update(
        {
            "jobs_per_s": jobs_per_s,
            "batches_per_s": load["rps"],
            "latency_ms": {k: load["latency"][k] for k in ("p50_ms", "p99_ms", "max_ms")},
            "server_cpu_us_per_job": round(cpu_us / args.batch, 1) if cpu_us else None,
            "sweep_1000": {"count": sweep["count"], "ms": round(sweep_ms, 1)},
            "stored": {"jobs": stored[0], "arrays": stored[1]},
            "load": load,
            "targets": {"jobs_per_s >= 10000": jobs_per_s >= 10_000},
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
