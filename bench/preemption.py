"""preemption: end-to-end preemption latency on a real node (docs/placement.md "Preemption").

    python -m bench.preemption [--quick] [--reps N]

A server with its local agent (``RUNPLANE_LOCAL_AGENT=1``, real processes; its slots are
the machine's cores). Each repetition: fill every slot with a low-priority (10)
preemptible job whose command traps SIGTERM and exits at once (``sh -c 'trap "exit 143"
TERM; sleep 600 & echo armed; wait'``, ``preempt_grace_sec: 1``) and wait until each runs and
has said ``armed`` (its ``sleep`` started: see :func:`wait_armed`); then submit
one high-priority (200) job (the same command, ``preempt_grace_sec: 1``) and wait until
it has started; then cancel everything and wait until it has ended, so the next repetition
starts from an idle node. N repetitions (quick 10, full 50).

Figures, from the store (unix ms, 1 ms resolution), per high job: the latency from its
submit to its start (``started_at - created_at``, target p99 < 1 s), and its parts (the
middle ones from the server's log, :func:`log_marks`): submit to placement's decision,
to the agent's stop order, to the victim's exit, to the victim's requeue stored (its
``queued`` event with ``reason: preempted``), to the high job's start (its assignment,
the agent starting the process, the ``running`` report). The grace is not waited: the
victims exit on SIGTERM, so the latency is the control plane's and the agent's, with no
grace in it ("minus the grace" in the issue).

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
    "command": ["sh", "-c", 'trap "exit 143" TERM; sleep 600 & echo armed; wait'],
    "priority": 10,
    "preemptible": True,
    "preempt_grace_sec": GRACE,
    "project": "victims",
}
HIGH = {
    "stack": "shell",
    "command": VICTIM["command"],
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


def wait_armed(client: httpx.Client, job_id: str, limit: float) -> None:
    """Wait for the victim's ``armed`` line: its ``sleep`` is started. A SIGTERM sent to
    the group while the shell forks it reaches the shell (which runs its trap and exits)
    but not the child forked just after: the group then lives until the grace is out."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        body = client.get(f"/v1/jobs/{job_id}/logs?stream=stdout&limit=10").json()
        if any(e["line"] == "armed" for e in body["logs"]):
            return
        time.sleep(0.005)
    raise RuntimeError(f"job {job_id} not armed after {limit} s")


def slots(db_path: Any) -> int:
    with sqlite3.connect(db_path) as db:
        row = db.execute("SELECT facts FROM nodes").fetchone()
    return int(json.loads(row[0]).get("max_concurrency") or 1) if row else 1


def repetition(client: httpx.Client, n_slots: int) -> str:
    """Fill the node, preempt, clean up; the high job's id."""
    victims = [submit(client, VICTIM) for _ in range(n_slots)]
    for job_id in victims:
        wait_until(client, job_id, ("running",), 60)
        wait_armed(client, job_id, 60)
    high = submit(client, HIGH)
    wait_until(client, high, ("running", *TERMINAL), 60)
    # the preempted victim waits in the queue (the high job keeps its slot): cancelled
    # there first (else it takes the next freed slot and is cancelled while starting),
    # then the others on SIGTERM, the high job once armed (see wait_armed)
    phases = {j: client.get(f"/v1/jobs/{j}").json()["phase"] for j in victims}
    for job_id in sorted(victims, key=lambda j: phases[j] != "queued"):
        client.post(f"/v1/jobs/{job_id}/cancel")
    wait_armed(client, high, 60)
    client.post(f"/v1/jobs/{high}/cancel")
    for job_id in (*victims, high):
        wait_until(client, job_id, TERMINAL, 60)
    return high


def _ms(rec: dict[str, Any]) -> int:
    return round(datetime.fromisoformat(rec["ts"].replace("Z", "+00:00")).timestamp() * 1000)


def log_marks(srv: common.Server) -> dict[str, dict[str, int]]:
    """From the server's log (unix ms), per high job: when placement decided its
    preemption (``preempting``), when the agent got the order to stop its (last) victim
    (``cancelling job``, ``preempted_by``), and when that victim's attempt ended (``job
    finished``)."""
    marks: dict[str, dict[str, int]] = {}
    by_victim: dict[tuple[str, int], str] = {}
    for rec in srv.log_lines():
        msg = rec.get("msg")
        if msg == "preempting" and rec.get("logger") == "runplane.placement":
            marks.setdefault(rec["job_id"], {}).setdefault("decided", _ms(rec))
        elif msg == "cancelling job" and rec.get("preempted_by"):
            by_victim[(rec["job_id"], rec["attempt"])] = rec["preempted_by"]
            marks.setdefault(rec["preempted_by"], {})["ordered"] = _ms(rec)
        elif msg == "job finished" and (rec["job_id"], rec["attempt"]) in by_victim:
            marks[by_victim[(rec["job_id"], rec["attempt"])]]["exited"] = _ms(rec)
    return marks


def sigkilled(srv: common.Server) -> int:
    """Attempts the agent had to SIGKILL after their grace (none expected: every job here
    exits on SIGTERM)."""
    return sum(
        1
        for rec in srv.log_lines()
        if rec.get("msg") == "job finished" and "SIGKILL" in str(rec.get("error"))
    )


def figures(db_path: Any, highs: list[str], marks: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The latency of each high job and its parts, from the store and the log ``marks``."""
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
    names = ("decision", "order_on_agent", "victim_exit", "victim_requeued", "start")
    parts: dict[str, list[float]] = {n: [] for n in names}
    total = []
    for job_id in highs:
        row = jobs[job_id]
        if row["started_at"] is None:
            continue
        total.append((row["started_at"] - row["created_at"]) / 1000)
        m = marks.get(job_id, {})
        if job_id not in gone or any(k not in m for k in ("decided", "ordered", "exited")):
            continue
        steps = (row["created_at"], m["decided"], m["ordered"], m["exited"], gone[job_id])
        for name, a, b in zip(names, steps, (*steps[1:], row["started_at"]), strict=True):
            parts[name].append((b - a) / 1000)
    return {
        "started": len(total),
        "preempted": sum(1 for j in highs if j in gone),
        "victims_per_preemption": sorted({victims.get(j, 0) for j in highs}),
        "submit_to_start": common.latency_summary(total),
        # submit -> placement's decision -> the agent's order -> the victim's exit -> its
        # requeue stored -> the high job running (each from the step before)
        "parts": {n: common.latency_summary(v) for n, v in parts.items()},
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
        got = figures(srv.db_path(), highs, log_marks(srv))
        got["attempts_sigkilled"] = sigkilled(srv)
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
