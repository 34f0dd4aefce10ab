"""ha: takeover time of ``RUNPLANE_HA=1`` replicas, and what a takeover loses.

    python -m bench.ha [--quick] [--kills N] [--cuts M] [--replicas R]

Three ``runplane serve`` replicas on loopback share one fresh PostgreSQL database
(``RUNPLANE_TEST_PG_URL``, else a ``scripts/pgtest`` server), with one real agent given
every replica's URL. A client thread submits jobs (``true``) all along, to the replicas in
turn, each with its own Idempotency-Key, retrying a refusal or a cut connection on the
next replica as a client behind a load balancer would; a job counts as acknowledged at its
202. N times (20; 5 with --quick), after 1.5 s of load, the leader is SIGKILLed, and the
**takeover time** is measured from the kill until a follower answers ``GET /v1/ha`` with
``role: leader`` (every live replica agreeing on the new epoch); the killed replica is then
started again (a follower now), as its process supervisor would. Then M times (5; 2 with
--quick) the leader's database session is ended (``pg_terminate_backend``, as a network cut
would): the takeover time likewise, and the old leader must step down in its process (the
same process, a follower again: docs/operations.md "High availability").

At the end: **lost** = acknowledged jobs not in the database (must be 0), **doubled** =
jobs the agent started more than once (its ``job started`` log lines; must be 0), and jobs
that needed a second attempt. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

from bench import common
from bench.ha_cluster import Cluster, Replica
from bench.store import fresh_database, postgres_server

TERMINAL = ("succeeded", "failed", "timeout", "cancelled")
BODY = {"stack": "shell", "command": ["true"]}


class Load:
    """Submits in a thread, round robin over the replicas, until stopped."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.acknowledged: list[str] = []
        self.retried = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        turn = 0
        with httpx.Client(timeout=10.0) as client:
            while not self.stop.is_set():
                key = uuid.uuid4().hex
                while not self.stop.is_set():
                    url = self.urls[turn % len(self.urls)]
                    turn += 1
                    try:
                        answer = client.post(
                            f"{url}/v1/jobs", json=BODY, headers={"Idempotency-Key": key}
                        )
                    except httpx.TransportError:
                        self.retried += 1
                        continue
                    if answer.status_code == 202:
                        self.acknowledged.append(answer.json()["job_id"])
                        break
                    self.retried += 1
                    time.sleep(0.02)
                time.sleep(0.02)


def started_counts(agent_log: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in agent_log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("msg") == "job started":
            counts[record["job_id"]] = counts.get(record["job_id"], 0) + 1
    return counts


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--kills", type=int, default=None)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--cuts", type=int, default=None)
    args = parser.parse_args(argv)
    kills = args.kills or (5 if args.quick else 20)
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "ha",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "replicas": args.replicas,
            "kills": kills,
            "lease_sec": 3.0,
            "signal": "SIGKILL",
            "load": "one client thread submitting `true` jobs round robin, Idempotency-Key",
            "agent": "one `runplane agent --server <every replica>`",
        },
    }
    workdir = Path(tempfile.mkdtemp(prefix="runplane-bench-ha-"))
    with postgres_server(False) as admin, fresh_database(admin or "") as url:
        cluster = Cluster(url, workdir, replicas=args.replicas)
        agent_log = workdir / "agent.log"
        agent: subprocess.Popen[bytes] | None = None
        try:
            leader = cluster.start_all()
            env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
            with agent_log.open("wb") as log:
                agent = subprocess.Popen(
                    [
                        common.PYTHON,
                        "-m",
                        "runplane",
                        "agent",
                        "--server",
                        ",".join(cluster.urls),
                        "--data-dir",
                        str(workdir / "agent"),
                        "--max-concurrency",
                        "8",
                    ],
                    cwd=common.REPO,
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                )
            load = Load(cluster.urls)
            load.thread.start()
            takeovers: list[float] = []
            stepped_down: list[bool] = []
            for _ in range(kills):
                time.sleep(1.5)
                killed_at = time.monotonic()
                cluster.kill(leader, signal.SIGKILL)
                new = cluster.wait_leader(other_than=leader, timeout=30.0)
                takeovers.append(time.monotonic() - killed_at)
                cluster.start(leader)
                leader = new
            cuts: list[float] = []
            for _ in range(args.cuts if args.cuts is not None else (2 if args.quick else 5)):
                time.sleep(1.5)
                cut_at = time.monotonic()
                _cut(url, leader)
                new = cluster.wait_leader(other_than=leader, timeout=30.0)
                cuts.append(time.monotonic() - cut_at)
                stepped_down.append(_steps_down(leader))
                leader = new
            time.sleep(1.5)
            load.stop.set()
            load.thread.join(30)
            acknowledged = set(load.acknowledged)
            lost, unfinished, requeued = _outcome(url, acknowledged)
            reasons = requeue_reasons(url, requeued)
            counts = started_counts(agent_log)
            doubled = sorted(j for j, n in counts.items() if n > 1)
        finally:
            if agent is not None:
                agent.send_signal(signal.SIGTERM)
                try:
                    agent.wait(30)
                except subprocess.TimeoutExpired:
                    agent.kill()
            cluster.stop_all()
    seconds = [t * 1000 for t in takeovers]
    result.update(
        {
            "takeover_ms": {
                "p50": round(common.pct(seconds, 0.5) or 0.0, 1),
                "max": round(max(seconds), 1),
                "min": round(min(seconds), 1),
                "all": [round(ms) for ms in seconds],
            },
            "cut_takeover_ms": {
                "p50": round(common.pct([t * 1000 for t in cuts], 0.5) or 0.0, 1),
                "max": round(max(cuts, default=0.0) * 1000, 1),
                "all": [round(t * 1000) for t in cuts],
                "old_leader_stepped_down": stepped_down,
            },
            "submits_acknowledged": len(acknowledged),
            "submits_retried": load.retried,
            "lost": len(lost),
            "doubled": len(doubled),
            "second_attempts": len(requeued),
            "second_attempt_reasons": reasons,
            "unfinished": len(unfinished),
            "targets": {
                "takeover under 5 s (every kill)": max(seconds) < 5000,
                "takeover under 5 s (every cut)": max(cuts, default=0.0) < 5.0,
                "a cut-off leader steps down in its process": all(stepped_down),
                "no acknowledged submit lost": not lost,
                "no job run twice": not doubled,
            },
        }
    )
    return common.finish(result, started)


def _outcome(url: str, acknowledged: set[str]) -> tuple[list[str], list[str], list[str]]:
    """(lost, not ended after 60 s, needed a second attempt), from the database."""
    import psycopg

    deadline = time.monotonic() + 60
    while True:
        with psycopg.connect(url) as conn:
            rows = conn.execute("SELECT id, phase, attempts FROM jobs").fetchall()
        stored = {r[0]: (r[1], r[2]) for r in rows}
        unfinished = [j for j in acknowledged if stored.get(j, ("", 0))[0] not in TERMINAL]
        if not unfinished or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    lost = sorted(j for j in acknowledged if j not in stored)
    requeued = sorted(j for j in acknowledged if j in stored and stored[j][1] > 0)
    return lost, [j for j in unfinished if j in stored], requeued


def _cut(url: str, leader: Replica) -> None:
    """End the leader's database session, as a network cut or a DBA's kill would."""
    import psycopg

    status = leader.status()
    assert status is not None and status["role"] == "leader", status
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            (f"runplane-lease {status['replica']}",),
        )


def _steps_down(replica: Replica, timeout: float = 30.0) -> bool:
    """True once the cut-off leader, its process still up, answers as a follower."""
    assert replica.proc is not None
    pid = replica.proc.pid
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not replica.alive:
            return False
        status = replica.status()
        if status is not None and status["role"] == "follower":
            return replica.proc.pid == pid
        time.sleep(0.05)
    return False


def requeue_reasons(url: str, jobs: list[str]) -> list[str]:
    """The system log lines saying why each job that needed a second attempt was requeued."""
    import psycopg

    if not jobs:
        return []
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT data FROM job_events WHERE kind = 'log' AND job_id = ANY(%s) ORDER BY ts",
            (jobs,),
        ).fetchall()
    lines = [json.loads(r[0]).get("line", "") for r in rows]
    return [line for line in lines if "requeued" in line or "never started" in line]


if __name__ == "__main__":
    main()
