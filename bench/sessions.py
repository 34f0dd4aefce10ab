"""sessions: interactive sessions: launch-to-ready of a health-gated pod, and the cost of
keeping many sessions alive.

    python -m bench.sessions [--quick] [--sessions N] [--live L] [--window S]

Two servers (``runplane serve`` on loopback, SQLite):

* ``ready``: with its local agent (a real ``runplane agent`` running real processes), N
  sessions (default 50) one after the other, each a pod of 3 services in a chain
  (a <- b <- c), every service ``sleep`` behind a health gate (``true``). Per session,
  from the store: launch-to-ready (the session's ``started_at - created_at``), the part of
  it the pod spent starting on the node (its job's ``pod of 3 services`` system line to
  its ``pod ready`` line: the services' own start time, health checks included), and the
  rest, the control plane's share (target p50 < 300 ms). Each session is deleted once
  ready (the agent's slots stay free).
* ``keepalive``: with no node (the sessions stay ``launching``, which is live), L sessions
  (default 200); the server's CPU share over S seconds idle, then over S seconds while a
  client sends each session a keepalive every 10 s (single: one request per session), then
  over S seconds while it sends ONE batch keepalive (``POST /v1/sessions/keepalive`` with
  all L ids) every 10 s; each form's difference per 100 sessions (target < 0.5 % of a
  core), and the server's RSS per session. For scale, the single form's rate of
  ``GET /healthz`` (the cheapest request the server answers) over S seconds.

Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from bench import common

READY_TARGET_MS = 300.0
KEEPALIVE_TARGET_SHARE = 0.005  # of a core, per 100 sessions
KEEPALIVE_EVERY_SEC = 10.0


def chain_pod() -> dict[str, Any]:
    gate = {"command": ["true"], "period_sec": 1, "timeout_sec": 5, "retries": 3}
    services = [
        {"name": "a", "command": ["sleep", "600"], "health": gate},
        {"name": "b", "needs": ["a"], "command": ["sleep", "600"], "health": gate},
        {"name": "c", "needs": ["b"], "command": ["sleep", "600"], "health": gate},
    ]
    return {"name": "bench", "pod": {"services": services}}


def wait_phase(client: httpx.Client, session_id: str, limit: float) -> dict[str, Any]:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        view = client.get(f"/v1/sessions/{session_id}").json()
        if view["phase"] in ("ready", "failed", "stopped"):
            return dict(view)
        time.sleep(0.005)
    raise RuntimeError(f"session {session_id} not ready after {limit} s")


def ready_figures(db_path: Any) -> dict[str, Any]:
    with sqlite3.connect(db_path) as db:
        db.row_factory = sqlite3.Row
        sessions = db.execute(
            "SELECT id, job_id, created_at, started_at FROM sessions WHERE started_at IS NOT NULL"
        ).fetchall()
        lines = db.execute(
            "SELECT job_id, ts, data FROM job_events WHERE kind = 'log'"
            " AND (data LIKE '%pod of 3 services%' OR data LIKE '%pod ready:%')"
        ).fetchall()
    marks: dict[tuple[str, str], int] = {}
    for line in lines:
        text = json.loads(line["data"])["line"]
        key = "start" if text.startswith("pod of") else "ready"
        marks.setdefault((line["job_id"], key), line["ts"])
    total, on_node, rest = [], [], []
    for s in sessions:
        whole = (s["started_at"] - s["created_at"]) / 1000
        total.append(whole)
        start, ready = marks.get((s["job_id"], "start")), marks.get((s["job_id"], "ready"))
        if start is not None and ready is not None:
            pod = (ready - start) / 1000
            on_node.append(pod)
            rest.append(whole - pod)
    return {
        "sessions": len(sessions),
        "launch_to_ready": common.latency_summary(total),
        "pod_start_on_node": common.latency_summary(on_node),
        "beyond_pod_start": common.latency_summary(rest),
        "timestamp_resolution_ms": 1,
    }


def phase_ready(n: int) -> dict[str, Any]:
    with common.server(local_agent=True) as srv:
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            failed = 0
            for _ in range(n):
                made = client.post("/v1/sessions", json=chain_pod())
                if made.status_code != 202:
                    raise RuntimeError(f"create: {made.status_code} {made.text}")
                view = wait_phase(client, made.json()["id"], 60)
                failed += view["phase"] != "ready"
                client.delete(f"/v1/sessions/{view['id']}")
        common.stop(srv.proc)
        figures = ready_figures(srv.db_path())
    figures["not_ready"] = failed
    return figures


def paced(
    srv: Any, window: float, every: float, send: Callable[[httpx.Client, int], bool]
) -> tuple[float, int, int]:
    """Server CPU share over ``window`` seconds while ``send(client, i)`` (True: answered
    as it should) is called every ``every`` seconds; and the sends and failures."""
    sent, errors = 0, 0
    meter = common.CpuMeter(srv.pid).start()
    end = time.monotonic() + window
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        next_at = time.monotonic()
        while time.monotonic() < end:
            errors += not send(client, sent)
            sent += 1
            next_at += every
            time.sleep(max(0.0, min(next_at, end) - time.monotonic()))
    return meter.stop(), sent, errors


def live_sessions(srv: Any, live: int) -> list[str]:
    body = {"pod": {"services": [{"name": "svc", "command": ["sleep", "600"]}]}}
    ids = []
    with httpx.Client(base_url=srv.url, timeout=30) as client:
        for _ in range(live):
            made = client.post("/v1/sessions", json=body)
            if made.status_code != 202:
                raise RuntimeError(f"create: {made.status_code} {made.text}")
            ids.append(made.json()["id"])
    return ids


def phase_keepalive(live: int, window: float) -> dict[str, Any]:
    with common.server() as srv:
        rss_before = common.proc_stat(srv.pid).rss_kb
        ids = live_sessions(srv, live)
        time.sleep(2.0)  # let the creates settle
        rss_after = common.proc_stat(srv.pid).rss_kb
        idle = common.CpuMeter(srv.pid).start()
        time.sleep(window)
        idle_share = idle.stop()
        interval = KEEPALIVE_EVERY_SEC / live  # spread evenly: each session every 10 s

        def single(client: httpx.Client, i: int) -> bool:
            return client.post(f"/v1/sessions/{ids[i % live]}/keepalive").status_code == 200

        def batch(client: httpx.Client, _: int) -> bool:
            response = client.post("/v1/sessions/keepalive", json={"ids": ids})
            return response.status_code == 200 and len(response.json()["sessions"]) == live

        def health(client: httpx.Client, _: int) -> bool:
            return client.get("/healthz").status_code == 200

        busy_share, sent, errors = paced(srv, window, interval, single)
        # one request for every session, every 10 s
        batch_share, batches, batch_errors = paced(srv, window, KEEPALIVE_EVERY_SEC, batch)
        # the floor: the cheapest request this server answers, at the single form's rate
        health_share, _, _ = paced(srv, window, interval, health)
    per_100 = max(0.0, busy_share - idle_share) * 100 / live
    batch_per_100 = max(0.0, batch_share - idle_share) * 100 / live
    health_per_100 = max(0.0, health_share - idle_share) * 100 / live
    return {
        "live_sessions": live,
        "window_s": window,
        "keepalives_sent": sent,
        "keepalive_errors": errors,
        "keepalives_per_s": round(sent / window, 1),
        "server_cpu_idle": idle_share,
        "server_cpu_with_keepalives": busy_share,
        "keepalive_cpu_per_100_sessions": round(per_100, 4),
        "keepalive_cpu_ratio": round(per_100 / KEEPALIVE_TARGET_SHARE, 3),
        "batch_requests_sent": batches,
        "batch_errors": batch_errors,
        "server_cpu_with_batch_keepalives": batch_share,
        "batch_keepalive_cpu_per_100_sessions": round(batch_per_100, 4),
        "batch_keepalive_cpu_ratio": round(batch_per_100 / KEEPALIVE_TARGET_SHARE, 3),
        "server_cpu_with_healthz_same_rate": health_share,
        "healthz_cpu_per_100_sessions_equivalent": round(health_per_100, 4),
        "keepalive_over_healthz": common.ratio(per_100, health_per_100),
        "rss_per_session_kb": round((rss_after - rss_before) / live, 1),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sessions", type=int, default=None)
    parser.add_argument("--live", type=int, default=200)
    parser.add_argument("--window", type=float, default=None)
    args = parser.parse_args(argv)
    n = args.sessions or (20 if args.quick else 50)
    window = args.window or (10.0 if args.quick else 30.0)
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "sessions",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "sessions": n,
            "pod": "3 services in a chain, each `sleep` behind a `true` health gate",
            "live_sessions": args.live,
            "keepalive_every_s": KEEPALIVE_EVERY_SEC,
            "window_s": window,
            "store": "sqlite (default)",
        },
    }
    with ThreadPoolExecutor(1) as pool:  # (sequential: one server at a time)
        ready = pool.submit(phase_ready, n).result()
        keep = pool.submit(phase_keepalive, args.live, window).result()
    beyond = ready["beyond_pod_start"]["p50_ms"]
    result.update(
        {
            "launch_to_ready_ms": ready["launch_to_ready"],
            "pod_start_on_node_ms": ready["pod_start_on_node"],
            "beyond_pod_start_ms": ready["beyond_pod_start"],
            "beyond_pod_start_p50_ratio": common.ratio(beyond, READY_TARGET_MS),
            "keepalive_cpu_per_100_sessions": keep["keepalive_cpu_per_100_sessions"],
            "keepalive_cpu_ratio": keep["keepalive_cpu_ratio"],
            "batch_keepalive_cpu_per_100_sessions": keep["batch_keepalive_cpu_per_100_sessions"],
            "batch_keepalive_cpu_ratio": keep["batch_keepalive_cpu_ratio"],
            "rss_per_session_kb": keep["rss_per_session_kb"],
            "ready": ready,
            "keepalive": keep,
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
