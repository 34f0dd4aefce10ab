"""local_lifecycle: N real trivial jobs (``true``) through the server's in-process agent.

    python -m bench.local_lifecycle [--quick] [--jobs N] [--connections C]
        [--executor sandbox] [--slots N] [--cores N]

The server runs with ``RUNPLANE_LOCAL_AGENT=1``: its own node agent, connected over
loopback like any other, starts each job as a real process group (``true``) with the
process executor (``--executor sandbox``: the sandbox executor) and reports it. N jobs
are submitted from a separate process (C connections) as fast as they are taken
(``burst``), then M more paced at R jobs/s, below capacity (``paced``: the node's slots
are mostly free); each phase ends when its jobs are terminal (polled in the SQLite file)
or at the time limit. Figures, from the store (unix ms): completed jobs/s in the burst
(first submit -> last finish), submit-to-running p50/p99 in both phases. This is the
figure to hold against Slurm's 37 jobs/s (32 jobs per core) on this machine. Prints ONE
JSON object.

``--slots N``: the agent's slots (``RUNPLANE_LOCAL_AGENT_MAX_CONCURRENCY``; default one
per core) and as many cores offered to placement (``RUNPLANE_LOCAL_AGENT_CPU_CORES``, or
``--cores``), since a job without limits reserves one: the cores oversubscribed, as in
Slurm's oversubscribed profile.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from typing import Any

from bench import common
from bench.lifecycle import BURST, PACED, phase_latencies

TERMINAL = ("succeeded", "failed", "timeout", "cancelled")


def wait_terminal(db_path: Any, n: int, limit: float) -> int:
    sql = f"SELECT count(*) FROM jobs WHERE phase IN ({','.join('?' * len(TERMINAL))})"
    return common.wait_count(db_path, sql, TERMINAL, n, limit)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--paced-rate", type=float, default=20.0, help="jobs/s, paced phase")
    parser.add_argument("--paced-jobs", type=int, default=None)
    parser.add_argument("--executor", choices=["process", "sandbox"], default="process")
    parser.add_argument("--slots", type=int, default=0, help="the agent's slots (0: its cores)")
    parser.add_argument(
        "--cores", type=int, default=0, help="cores the agent offers (0: counted; --slots N: N)"
    )
    args = parser.parse_args(argv)
    n = args.jobs or (300 if args.quick else 2000)
    m = args.paced_jobs or (60 if args.quick else 300)
    limit = 60 + n / 5  # seconds: bounded even at 5 jobs/s
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "local_lifecycle",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "jobs": n,
            "submit_connections": args.connections,
            "agent": "in-process local agent (RUNPLANE_LOCAL_AGENT=1), "
            + (f"{args.slots} slots" if args.slots else "default slots"),
            "executor": args.executor,
            "command": ["true"],
            "store": "sqlite (default)",
            "paced_jobs": m,
            "paced_rate": args.paced_rate,
        },
    }
    env = {"RUNPLANE_LOCAL_AGENT_EXECUTOR": args.executor}
    if args.slots:
        env["RUNPLANE_LOCAL_AGENT_MAX_CONCURRENCY"] = str(args.slots)
    cores = args.cores or args.slots  # a job reserves a core: N slots need N cores offered
    if cores:
        env["RUNPLANE_LOCAL_AGENT_CPU_CORES"] = str(cores)
    with common.server(local_agent=True, env=env) as srv:
        meter = common.CpuMeter(srv.pid).start()
        submit = common.http_load(
            srv.pid,
            srv.port,
            path="/v1/jobs",
            method="POST",
            body=BURST,
            connections=args.connections,
            seconds=limit,
            warmup=0,
            count=n,
        )
        done = wait_terminal(srv.db_path(), n, limit)
        server_cpu = meter.stop()
        paced = common.http_load(
            srv.pid,
            srv.port,
            path="/v1/jobs",
            method="POST",
            body=PACED,
            connections=4,
            seconds=limit,
            warmup=0,
            count=m,
            rate=args.paced_rate,
        )
        done += wait_terminal(srv.db_path(), n + m, limit) - n
        nodes = [r for r in srv.log_lines() if r.get("msg") == "node attached"]
        common.stop(srv.proc)
        figures = phase_latencies(srv.db_path(), "burst")
        paced_figures = phase_latencies(srv.db_path(), "paced")
        with sqlite3.connect(srv.db_path()) as db:
            facts = db.execute("SELECT facts FROM nodes").fetchone()
    node_facts = json.loads(facts[0]) if facts else {}
    result["settings"]["agent_slots"] = node_facts.get("max_concurrency")
    result["settings"]["agent_cores"] = node_facts.get("cpu_cores")
    result.update(
        {
            "completed_per_s": figures["completed_per_s"],
            "submit_to_running_ms": {
                k: figures["submit_to_running"][k] for k in ("p50_ms", "p99_ms")
            },
            "paced_submit_to_running_ms": {
                k: paced_figures["submit_to_running"][k] for k in ("p50_ms", "p99_ms")
            },
            "terminal": done,
            "figures": figures,
            "paced_figures": paced_figures,
            "submit": submit,
            "paced_submit": paced,
            "server_cpu_share": server_cpu,
            "nodes_attached": len(nodes),
            "targets": {
                "completed_per_s >= 50": (figures["completed_per_s"] or 0) >= 50,
                "paced_submit_to_running_p50_ms < 50": (
                    paced_figures["submit_to_running"]["p50_ms"] or 1e9
                )
                < 50,
            },
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
