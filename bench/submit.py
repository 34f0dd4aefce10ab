"""submit: sustained ``POST /v1/jobs`` at 50 connections on the default SQLite store.

    python -m bench.submit [--quick] [--connections 50] [--seconds 10]

No node is connected (``RUNPLANE_LOCAL_AGENT=0``, no agent), so every job stays queued:
this measures admission (parse, resolve, durable insert with group commit, job actor
activation, the 202 view). In the same run, the ceilings:

* ``healthz``: ``GET /healthz`` on the same runplane server (runplane's hello-world route:
  same hypercorn + Quart-trio stack, same middleware and logging);
* ``quart_hello`` / ``asgi_hello``: a one-route Quart-trio app, and a bare ASGI callable,
  under hypercorn's trio worker built like ``runplane serve`` (with runplane's serving
  fixes, ``runplane/http/serving.py``), and ``*_stock``: the same under stock hypercorn;
* ``h11_hello``: a minimal trio + h11 server.

Ratios: ``submit / healthz`` (the target is >= 0.8, issue 42), ``healthz / h11_hello`` and
``asgi_hello / asgi_hello_stock``. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from typing import Any

from bench import common

BODY = json.dumps({"stack": "shell", "command": ["true"], "project": "bench"})


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short phases (about 40 s in all)")
    parser.add_argument(
        "--lean-lanes",
        choices=("on", "off"),
        default="on",
        help="the lean lanes (docs/lean-lanes.md): on, as shipped; off: Quart answers all",
    )
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=None, help="length of each phase")
    args = parser.parse_args(argv)
    seconds = args.seconds or (4.0 if args.quick else 10.0)
    ceiling_seconds = seconds if not args.quick else 3.0
    conns = args.connections
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "submit",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "lean_lanes": args.lean_lanes,
            "connections": conns,
            "seconds": seconds,
            "ceiling_seconds": ceiling_seconds,
            "warmup_seconds": 1.0,
            "store": "sqlite (default; WAL, synchronous=FULL)",
            "body": BODY,
            "nodes": 0,
        },
    }
    with common.server(env=common.lanes_env(args.lean_lanes)) as srv:
        submit = common.http_load(
            srv.pid,
            srv.port,
            path="/v1/jobs",
            method="POST",
            body=BODY,
            connections=conns,
            seconds=seconds,
        )
        healthz = common.http_load(srv.pid, srv.port, connections=conns, seconds=ceiling_seconds)
        common.stop(srv.proc)
        with sqlite3.connect(srv.db_path()) as db:
            stored = db.execute("SELECT count(*), sum(phase = 'queued') FROM jobs").fetchone()
    ceilings: dict[str, Any] = {"healthz": healthz}
    for kind, key in (
        ("quart", "quart_hello"),
        ("quart-stock", "quart_hello_stock"),
        ("asgi", "asgi_hello"),
        ("asgi-stock", "asgi_hello_stock"),
        ("h11", "h11_hello"),
    ):
        with common.hello_server(kind) as (port, pid):
            ceilings[key] = common.http_load(
                pid, port, path="/", connections=conns, seconds=ceiling_seconds
            )
    accepted = submit["statuses"].get("202", 0)
    jobs_per_s = round(accepted / submit["seconds"], 1)
    rps = {k: v["rps"] for k, v in ceilings.items()}
    result.update(
        {
            "jobs_per_s": jobs_per_s,
            "latency_ms": {k: submit["latency"][k] for k in ("p50_ms", "p99_ms", "max_ms")},
            "submit": submit,
            "stored_jobs": {"rows": stored[0], "queued": stored[1]},
            "ceiling_rps": rps,
            "ratio": {
                "submit_over_healthz": common.ratio(jobs_per_s, rps["healthz"]),
                "submit_over_h11_hello": common.ratio(jobs_per_s, rps["h11_hello"]),
                "healthz_over_h11_hello": common.ratio(rps["healthz"], rps["h11_hello"]),
                "asgi_hello_over_h11_hello": common.ratio(rps["asgi_hello"], rps["h11_hello"]),
                "asgi_hello_fixed_over_stock": common.ratio(
                    rps["asgi_hello"], rps["asgi_hello_stock"]
                ),
                "quart_hello_fixed_over_stock": common.ratio(
                    rps["quart_hello"], rps["quart_hello_stock"]
                ),
            },
            "ceilings": ceilings,
            "targets": {
                "jobs_per_s >= 1000": jobs_per_s >= 1000,
                "p99_ms < 100": (submit["latency"]["p99_ms"] or 1e9) < 100,
                "submit_over_healthz >= 0.8": (common.ratio(jobs_per_s, rps["healthz"]) or 0)
                >= 0.8,
            },
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
