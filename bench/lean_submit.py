"""lean_submit: single submits on the lean lane and on Quart, A/B in one run.

    python -m bench.lean_submit [--quick] [--rounds 2] [--seconds 4]

Alternating rounds on fresh servers: ``runplane serve`` with ``RUNPLANE_LEAN_LANES=0``
(Quart answers every request) and as shipped (``POST /v1/jobs`` on its lean lane,
docs/lean-lanes.md). Each round: ``POST /v1/jobs`` at 50 connections (no node), then
``GET /healthz`` on the same server. Figures per variant: durable jobs/s, server CPU per
submit, the ratio to ``/healthz``. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from bench import common

BODY = json.dumps({"stack": "shell", "command": ["true"], "project": "bench"})


def round_of(lanes: str, seconds: float) -> dict[str, Any]:
    with common.server(env=common.lanes_env(lanes)) as srv:
        submit = common.http_load(
            srv.pid, srv.port, path="/v1/jobs", method="POST", body=BODY, seconds=seconds
        )
        healthz = common.http_load(srv.pid, srv.port, seconds=min(seconds, 3.0))
    jobs_per_s = round(submit["statuses"].get("202", 0) / submit["seconds"], 1)
    return {
        "jobs_per_s": jobs_per_s,
        "submit_cpu_us": submit.get("server_cpu_us_per_request"),
        "p99_ms": submit["latency"]["p99_ms"],
        "healthz_rps": healthz["rps"],
        "ratio": common.ratio(jobs_per_s, healthz["rps"]),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one round of each, 3 s")
    parser.add_argument("--rounds", type=int, default=None)
    parser.add_argument("--seconds", type=float, default=None)
    args = parser.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 2)
    seconds = args.seconds or (3.0 if args.quick else 4.0)
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "lean_submit",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {"rounds": rounds, "seconds": seconds, "connections": 50, "body": BODY},
    }
    runs: dict[str, list[dict[str, Any]]] = {"quart": [], "lean": []}
    for _ in range(rounds):
        runs["quart"].append(round_of("off", seconds))
        runs["lean"].append(round_of("on", seconds))

    def best(name: str, key: str) -> Any:
        return max(r[key] or 0 for r in runs[name])

    result.update(
        {
            "rounds": runs,
            "jobs_per_s": {name: best(name, "jobs_per_s") for name in runs},
            "ratio": {name: best(name, "ratio") for name in runs},
            "submit_cpu_us": {name: min(r["submit_cpu_us"] for r in runs[name]) for name in runs},
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
