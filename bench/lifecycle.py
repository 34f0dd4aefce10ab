"""lifecycle: N trivial jobs through K simulated agents that complete each job at once.

    python -m bench.lifecycle [--quick] [--jobs N] [--agents K] [--connections C]

The agents (``bench.simagents``, one separate process, K real WebSocket connections)
enroll, heartbeat and answer each ``run`` with ``running`` then ``succeeded`` at once.
Three phases, each its own ``project``: ``drain``: D jobs are queued before any agent
connects, then the agents connect and take them (completed jobs/s from the first
assignment to the last finish: the lifecycle alone, no submissions competing); ``burst``:
a second process submits N jobs over HTTP (C connections) as fast as they are taken
(end to end); ``paced``: once the burst has drained, M more at R jobs/s (the agents
are free, the server is not saturated). Figures, from the store after the run (unix
ms): completed jobs/s in the burst (N over first submit -> last finish), and for both
phases submit-to-assigned and submit-to-running p50/p99 (``created_at`` to the
``assigned`` / ``running`` phase events). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from typing import Any

from bench import common

BURST = json.dumps({"stack": "shell", "command": ["true"], "project": "burst"})
PACED = json.dumps({"stack": "shell", "command": ["true"], "project": "paced"})
DRAIN = json.dumps({"stack": "shell", "command": ["true"], "project": "drain"})


def phase_latencies(db_path: Any, project: str) -> dict[str, Any]:
    """Figures of the jobs of one ``project`` (a phase of the run), from the store."""
    with sqlite3.connect(db_path) as db:
        db.row_factory = sqlite3.Row
        jobs = db.execute(
            "SELECT id, phase, created_at, started_at, finished_at FROM jobs WHERE project = ?",
            (project,),
        ).fetchall()
        events = db.execute(
            "SELECT job_id, ts, data FROM job_events WHERE kind = 'phase'"
        ).fetchall()
    phase_ts: dict[tuple[str, str], int] = {}
    for ev in events:
        phase = json.loads(ev["data"])["phase"]
        phase_ts.setdefault((ev["job_id"], phase), ev["ts"])
    to_assigned, to_running, to_done = [], [], []
    phases: dict[str, int] = {}
    for job in jobs:
        phases[job["phase"]] = phases.get(job["phase"], 0) + 1
        created = job["created_at"]
        if (job["id"], "assigned") in phase_ts:
            to_assigned.append((phase_ts[(job["id"], "assigned")] - created) / 1000)
        if (job["id"], "running") in phase_ts:
            to_running.append((phase_ts[(job["id"], "running")] - created) / 1000)
        if job["finished_at"]:
            to_done.append((job["finished_at"] - created) / 1000)
    done = [j for j in jobs if j["phase"] == "succeeded"]
    window_ms = (
        max(j["finished_at"] for j in done) - min(j["created_at"] for j in jobs) if done else 0
    )
    assigned = [ts for (_, ph), ts in phase_ts.items() if ph == "assigned"]
    drain_ms = max(j["finished_at"] for j in done) - min(assigned) if done and assigned else 0
    return {
        "jobs": len(jobs),
        "phases": phases,
        "completed": len(done),
        "window_s": round(window_ms / 1000, 3),
        "completed_per_s": round(len(done) / (window_ms / 1000), 1) if window_ms else None,
        "first_assigned_to_last_finished_s": round(drain_ms / 1000, 3),
        "completed_per_s_from_first_assigned": (
            round(len(done) / (drain_ms / 1000), 1) if drain_ms else None
        ),
        "submit_to_assigned": common.latency_summary(to_assigned),
        "submit_to_running": common.latency_summary(to_running),
        "submit_to_finished": common.latency_summary(to_done),
        "timestamp_resolution_ms": 1,
    }


def wait_done(db_path: Any, project: str, n: int, limit: float) -> int:
    """Poll the store file until ``n`` jobs of ``project`` succeeded (or ``limit`` s)."""
    return common.wait_count(
        db_path,
        "SELECT count(*) FROM jobs WHERE project = ? AND phase = 'succeeded'",
        (project,),
        n,
        limit,
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--slots", type=int, default=4, help="max_concurrency of each agent")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--paced-rate", type=float, default=50.0, help="jobs/s, paced phase")
    parser.add_argument("--paced-jobs", type=int, default=None)
    parser.add_argument("--drain-jobs", type=int, default=None)
    args = parser.parse_args(argv)
    n = args.jobs or (2000 if args.quick else 10000)
    m = args.paced_jobs or (300 if args.quick else 1000)
    d = args.drain_jobs if args.drain_jobs is not None else n
    limit = min(600, 60 + (n + d) // 20)  # seconds: bounded even if the server stalls
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "lifecycle",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "jobs": n,
            "agents": args.agents,
            "agent_slots": args.slots,
            "agent_cores": 8,
            "submit_connections": args.connections,
            "store": "sqlite (default)",
            "body": BURST,
            "paced_jobs": m,
            "paced_rate": args.paced_rate,
            "drain_jobs": d,
        },
    }
    with common.server() as srv:
        if d:  # queued before any agent connects: the drain measures the lifecycle alone
            common.http_load(
                srv.pid,
                srv.port,
                path="/v1/jobs",
                method="POST",
                body=DRAIN,
                connections=args.connections,
                seconds=limit,
                warmup=0,
                count=d,
            )
        agents = common.spawn(
            [
                "bench.simagents",
                "--port",
                str(srv.port),
                "--agents",
                str(args.agents),
                "--slots",
                str(args.slots),
                "--mode",
                "complete",
                "--expect",
                str(d + n + m),
                "--seconds",
                str(limit),
            ]
        )
        try:
            drain_meter = common.CpuMeter(srv.pid).start()
            ready = common.read_json_line(agents, 150.0)
            drained = wait_done(srv.db_path(), "drain", d, limit) if d else 0
            drain_cpu = drain_meter.stop()
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
            server_cpu = meter.stop()
            # the paced phase measures latency with free agents: the burst drains first
            # (a faster burst submit would otherwise leave more backlog ahead of it)
            burst_done = wait_done(srv.db_path(), "burst", n, limit)
            paced = common.http_load(
                srv.pid,
                srv.port,
                path="/v1/jobs",
                method="POST",
                body=PACED,
                connections=10,
                seconds=limit,
                warmup=0,
                count=m,
                rate=args.paced_rate,
            )
            summary = common.read_json_line(agents, limit + 30.0)
        finally:
            common.stop(agents)
        common.stop(srv.proc)
        figures = phase_latencies(srv.db_path(), "burst")
        drain_figures = phase_latencies(srv.db_path(), "drain") if d else None
        paced_figures = phase_latencies(srv.db_path(), "paced")
    result.update(
        {
            "completed_per_s": figures["completed_per_s"],
            "drain_completed_per_s": (
                drain_figures["completed_per_s_from_first_assigned"] if drain_figures else None
            ),
            "drain": {
                "jobs": d,
                "succeeded_seen": drained,
                "server_cpu_share": drain_cpu,
                "figures": drain_figures,
            },
            "submit_to_assigned_ms": {
                k: figures["submit_to_assigned"][k] for k in ("p50_ms", "p99_ms")
            },
            "submit_to_running_ms": {
                k: figures["submit_to_running"][k] for k in ("p50_ms", "p99_ms")
            },
            "paced_submit_to_running_ms": {
                k: paced_figures["submit_to_running"][k] for k in ("p50_ms", "p99_ms")
            },
            "figures": figures,
            "paced_figures": paced_figures,
            "agents_connect_s": ready.get("connect_s"),
            "agents": summary,
            "submit": submit,
            "burst_succeeded_before_paced": burst_done,
            "paced_submit": paced,
            "server_cpu_share": server_cpu,
            "targets": {
                "completed_per_s >= 300": (figures["completed_per_s"] or 0) >= 300,
                "drain_completed_per_s >= 300": (
                    (drain_figures or {}).get("completed_per_s_from_first_assigned") or 0
                )
                >= 300,
                "paced_submit_to_running_p99_ms < 100": (
                    paced_figures["submit_to_running"]["p99_ms"] or 1e9
                )
                < 100,
            },
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
