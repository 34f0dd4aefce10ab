"""preemption: end-to-end preemption latency on a real node (docs/placement.md "Preemption").

    python -m bench.preemption [--quick] [--reps N]

A server with its local agent (``RUNPLANE_LOCAL_AGENT=1``, real processes; its slots are
the machine's cores). Each repetition: fill every slot with a low-priority (10)
preemptible job whose command traps SIGTERM and exits at once (``sh -c 'trap "exit 143"
TERM; sleep 600 & wait'``, ``preempt_grace_sec: 1``) and wait until all run; then submit
one high-priority (200) job (``true``, ``preempt_grace_sec: 1``) and wait until it has
started; then cancel everything and wait until it has ended, so the next repetition
starts from an idle node. N repetitions (quick 10, full 50).

Figures, from the store (unix ms, 1 ms resolution), per high job: the latency from its
submit to its start (``started_at - created_at``, target p99 < 1 s), and its parts: submit
to the preemption decision (placement's ``preempting`` log record), decision to the
victim's attempt ended (the victim's ``queued`` event with ``reason: preempted``), and
that to the start (its assignment, the agent starting the process, the ``running``
report). The grace is not waited: the victims exit on SIGTERM, so the latency is the
control plane's and the agent's, with no grace in it ("minus the grace" in the issue).

Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import time
from datetime import datetime
from typing import Any

import httpx

from bench import common

TARGET_P99_MS = 1000.0
GRACE = 1
VICTIM = {
    "stack": "shell",
    "command": ["sh", "-c", 'trap "exit 143" TERM; sleep 600 & wait'],
    "priority": 10,
    "preemptible": True,
    "preempt_grace_sec": GRACE,
    "project": "victims",
}
HIGH = {
    "stack": "shell",
    "command": ["true"],
    "priority": 200,
    "preempt_grace_sec": GRACE,
    "project": "high",
}
TERMINAL = ("succeeded", "failed", "timeout", "cancelled")


def submit(client: httpx.Client, body: dict[str, Any]) -> str:
    made = client.post("/v1/jobs", json=body)
    if made.status_code not in (200, 201, 202):
        raise RuntimeError(f"submit: {made.status_code} {made.text}")
    return str(made.json()["job_id"])


def wait_until(client: httpx.Client, job_id: str, phases: tuple[str, ...], limit: float) -> str:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        phase = str(client.get(f"/v1/jobs/{job_id}").json()["phase"])
        if phase in phases:
            return phase
        time.sleep(0.005)
    raise RuntimeError(f"job {job_id} not {'/'.join(phases)} after {limit} s")


def slots(db_path: Any) -> int:
    with sqlite3.connect(db_path) as db:
        row = db.execute("SELECT facts FROM nodes").fetchone()
    return int(json.loads(row[0]).get("max_concurrency") or 1) if row else 1


def repetition(client: httpx.Client, n_slots: int) -> str:
    """Fill the node, preempt, clean up; the high job's id."""
    victims = [submit(client, VICTIM) for _ in range(n_slots)]
    for job_id in victims:
        wait_until(client, job_id, ("running",), 60)
    high = submit(client, HIGH)
    wait_until(client, high, ("running", *TERMINAL), 60)
    for job_id in victims:
        client.post(f"/v1/jobs/{job_id}/cancel")
    for job_id in (*victims, high):
        wait_until(client, job_id, TERMINAL, 60)
    return high


def decisions(srv: common.Server) -> dict[str, int]:
    """When placement decided each preemption (unix ms): its ``preempting`` log record."""
    out: dict[str, int] = {}
    for rec in srv.log_lines():
        if rec.get("msg") == "preempting" and rec.get("logger") == "runplane.placement":
            ts = datetime.fromisoformat(rec["ts"].replace("Z", "+00:00"))
            out.setdefault(rec["job_id"], round(ts.timestamp() * 1000))
    return out


def figures(db_path: Any, highs: list[str], decided: dict[str, int]) -> dict[str, Any]:
    """The latency of each high job and its parts, from the store (the decision: from the
    server's log, ``decided``)."""
    with sqlite3.connect(db_path) as db:
        db.row_factory = sqlite3.Row
        jobs = {
            r["id"]: r
            for r in db.execute(
                "SELECT id, created_at, started_at FROM jobs WHERE project = 'high'"
            )
        }
        events = db.execute(
            "SELECT job_id, ts, data FROM job_events WHERE kind = 'phase'"
        ).fetchall()
    gone: dict[str, int] = {}
    victims: dict[str, int] = {}
    for ev in events:
        data = json.loads(ev["data"])
        if data.get("reason") == "preempted" and data.get("by"):
            gone[data["by"]] = max(gone.get(data["by"], 0), ev["ts"])
            victims[data["by"]] = victims.get(data["by"], 0) + 1
    total, to_decision, to_gone, to_start = [], [], [], []
    for job_id in highs:
        row = jobs[job_id]
        if row["started_at"] is None:
            continue
        total.append((row["started_at"] - row["created_at"]) / 1000)
        if job_id in decided and job_id in gone:
            to_decision.append((decided[job_id] - row["created_at"]) / 1000)
            to_gone.append((gone[job_id] - decided[job_id]) / 1000)
            to_start.append((row["started_at"] - gone[job_id]) / 1000)
    return {
        "started": len(total),
        "preempted": sum(1 for j in highs if j in gone),
        "victims_per_preemption": sorted({victims.get(j, 0) for j in highs}),
        "submit_to_start": common.latency_summary(total),
        "submit_to_decision": common.latency_summary(to_decision),
        "decision_to_victim_gone": common.latency_summary(to_gone),
        "victim_gone_to_start": common.latency_summary(to_start),
        "timestamp_resolution_ms": 1,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--reps", type=int, default=None)
    args = parser.parse_args(argv)
    reps = args.reps or (10 if args.quick else 50)
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "preemption",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "repetitions": reps,
            "agent": "in-process local agent (RUNPLANE_LOCAL_AGENT=1), default slots",
            "victim": VICTIM,
            "high": HIGH,
            "store": "sqlite (default)",
            "grace": "not waited: the victims exit on SIGTERM",
        },
    }
    with common.server(local_agent=True) as srv:
        n_slots = slots(srv.db_path())
        with httpx.Client(base_url=srv.url, timeout=30) as client:
            highs = [repetition(client, n_slots) for _ in range(reps)]
            metrics = client.get("/metrics").text
        common.stop(srv.proc)
        got = figures(srv.db_path(), highs, decisions(srv))
    total = [ln for ln in metrics.splitlines() if ln.startswith("runplane_preemptions_total")]
    p99 = got["submit_to_start"]["p99_ms"]
    result["settings"]["agent_slots"] = n_slots
    result.update(
        {
            "latency_ms": {k: got["submit_to_start"][k] for k in ("p50_ms", "p99_ms")},
            "figures": got,
            "preemptions_total": total[0].split()[-1] if total else None,
            "targets": {
                "submit_to_start_p99_ms < 1000": {
                    "value_ms": p99,
                    "target_ms": TARGET_P99_MS,
                    "met": p99 is not None and p99 < TARGET_P99_MS,
                },
            },
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
