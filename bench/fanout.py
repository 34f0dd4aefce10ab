"""fanout: S SSE subscribers on one job while it logs L lines/s.

    python -m bench.fanout [--quick] [--subscribers S] [--lines-per-s L] [--log-seconds D]

A job is submitted (queued: no node yet); S subscribers (``bench.ssesub``, one process)
open ``GET /v1/jobs/{id}/events``; then one simulated agent (``bench.simagents --mode
log``, another process) connects, takes the job, logs L lines/s for D seconds in 10 ms
batches, each line stamped with its send time, and finishes it. Figures: lines delivered
per second (all subscribers), delivery latency p50/p99 (agent send -> subscriber
receive, through the server's store write, ring and SSE), and whether every subscriber
received every line, in order. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
import urllib.request
from typing import Any

from bench import common


def submit_one(port: int) -> str:
    req = urllib.request.Request(
        f"http://{common.LOOPBACK}:{port}/v1/jobs",
        data=json.dumps({"stack": "shell", "command": ["true"]}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return str(json.loads(resp.read())["job_id"])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--subscribers", type=int, default=None)
    parser.add_argument("--lines-per-s", type=float, default=None)
    parser.add_argument("--log-seconds", type=float, default=None)
    args = parser.parse_args(argv)
    subs = args.subscribers or (100 if args.quick else 1000)
    rate = args.lines_per_s or (200.0 if args.quick else 1000.0)
    secs = args.log_seconds or (5.0 if args.quick else 10.0)
    limit = secs + 90
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "fanout",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {"subscribers": subs, "lines_per_s": rate, "log_seconds": secs},
    }
    with common.server() as srv:
        job_id = submit_one(srv.port)
        sse = common.spawn(
            [
                "bench.ssesub",
                "--port",
                str(srv.port),
                "--job",
                job_id,
                "--subscribers",
                str(subs),
                "--seconds",
                str(limit + 60),
            ]
        )
        agent = None
        try:
            ready = common.read_json_line(sse, 90.0)
            meter = common.CpuMeter(srv.pid).start()
            agent = common.spawn(
                [
                    "bench.simagents",
                    "--port",
                    str(srv.port),
                    "--agents",
                    "1",
                    "--mode",
                    "log",
                    "--lines-per-s",
                    str(rate),
                    "--log-seconds",
                    str(secs),
                    "--expect",
                    "1",
                    "--seconds",
                    str(limit),
                ]
            )
            common.read_json_line(agent, 60.0)  # the agent is connected
            delivered = common.read_json_line(sse, limit + 90)  # streams ended (or timed out)
            server_cpu = meter.stop()
            try:  # its finish is acknowledged by now, unless its session was cut
                agent_summary = common.read_json_line(agent, 10.0)
            except TimeoutError:
                common.stop(agent)  # SIGTERM: it prints its summary and exits
                agent_summary = common.read_json_line(agent, 10.0)
        finally:
            if agent is not None:
                common.stop(agent)
            common.stop(sse)
    sent = agent_summary["lines_sent"]
    # from the first line sent to the last line received by anyone
    log_window = (delivered["last_line_at"] or 0) - (agent_summary["log_started"] or 0)
    every_line = (
        delivered["subscribers"] == subs
        and delivered["lines_min"] == sent
        and delivered["out_of_order"] == 0
    )
    # lines delivered / s: every copy of every line (each subscriber's counts)
    per_s = round(delivered["lines_total"] / log_window, 1) if log_window > 0 else None
    result.update(
        {
            "delivered_lines_per_s": per_s,
            "offered_lines_per_s": rate * subs,
            "latency_ms": {k: delivered["latency"][k] for k in ("p50_ms", "p99_ms", "max_ms")},
            "every_line_in_order": every_line,
            "lines_sent": sent,
            "subscribers_ready": ready.get("ready"),
            "subscribers": delivered,
            "agent": agent_summary,
            "server_cpu_share": server_cpu,
            "targets": {
                "1000 subscribers x 1000 lines/s": subs >= 1000 and rate >= 1000,
                "every line delivered": every_line,
                "p99_ms < 100": (delivered["latency"]["p99_ms"] or 1e9) < 100,
            },
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
