"""chaos: a soak of the whole system under mixed faults, and what it lost or doubled.

    python -m bench.chaos [--minutes N | --seconds S | --quick] [--seed K] [--every F]

A private PostgreSQL cluster (``scripts/pgtest`` in a temporary directory, stopped at the
end), two ``RUNPLANE_HA=1`` replicas on it (``bench.ha_cluster``), three real agents given
both replicas' URLs (3 slots each). For N minutes (30; ``--quick``: 2), steady work
(``bench.chaos_work``): jobs at ``--rate`` per second (quick ones, ``sleep`` ones, ones
with a retry policy that fail their first try, ones printing lines that SSE followers
record, reconnecting with Last-Event-ID after every drop), a pipeline every 30 s (a ->
(b, c) -> d; ``c`` fails on odd runs), and a session whose pod echoes teleop frames onto
its stream, driven at 5 frames/s and followed over SSE, then deleted. Every job appends
``<job id> <attempt> start|done`` to a ledger file outside its workdir.

Meanwhile, every ``--every`` seconds on average (seeded: ``--seed``), a fault
(``bench.chaos_cluster``): SIGKILL an agent (started again 2-5 s later), SIGSTOP an agent
for 20 s, SIGKILL the leader replica (started again on its port 2-5 s later),
``pg_ctl restart -m fast`` or ``-m immediate``. The harness is the process supervisor:
a replica or agent that exits by itself is started again, its exit code counted
(``replica_exits``, ``agent_exits``).

Then the faults stop, the work stops, everything drains (bounded), and the checks:
``lost`` (acknowledged jobs not stored, or ended without ever starting), ``doubled`` (a
(job, attempt) started twice, a job that succeeded twice, or one that started after it
ended), ``stuck`` (not ended after the drain), the log followers against each job's
stored log (``follow_missing``, ``follow_duplicated``, ``follow_out_of_order``), the
pipelines' statuses against their stages, the session's end, the replicas' RSS growth
per hour, and ERROR lines with a traceback or "unhandled" in every log. Progress on
stderr every 30 s; ONE JSON object on stdout; ``ok`` is true when lost, doubled and
stuck are 0 and the followers are exact.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common
from bench.chaos_check import check, drain, unhandled
from bench.chaos_cluster import Agent, Faults, Postgres, RssSampler, Supervisor, schedule
from bench.chaos_session import SessionDriver
from bench.chaos_work import Failover, Pipelines, Submitter
from bench.ha_cluster import Cluster
from bench.store import fresh_database


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--seconds", type=float, default=None, help="overrides --minutes")
    parser.add_argument("--quick", action="store_true", help="2 minutes")
    parser.add_argument("--seed", type=int, default=41)
    parser.add_argument("--every", type=float, default=None, help="mean seconds between faults")
    parser.add_argument("--rate", type=float, default=2.0, help="job submits per second")
    parser.add_argument("--stop-sec", type=float, default=20.0, help="an agent's SIGSTOP")
    parser.add_argument("--drain", type=float, default=None, help="seconds to wait at the end")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args(argv)
    if args.seconds is None:
        args.seconds = 120.0 if args.quick else args.minutes * 60
    if args.every is None:
        args.every = max(10.0, min(60.0, args.seconds / 12))
    if args.drain is None:
        args.drain = 120.0 if args.seconds < 600 else 240.0
    return args


def progress(started: float, **figures: Any) -> None:
    parts = " ".join(f"{k}={v}" for k, v in figures.items())
    print(f"chaos {time.monotonic() - started:6.0f} s {parts}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    started = time.monotonic()
    plan = schedule(args.seed, args.seconds, args.every)
    result: dict[str, Any] = {
        "bench": "chaos",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {
            "seconds": args.seconds,
            "seed": args.seed,
            "fault_every_s": args.every,
            "rate_per_s": args.rate,
            "stop_s": args.stop_sec,
            "drain_s": args.drain,
            "replicas": 2,
            "agents": 3,
            "slots_per_agent": 3,
            "lease_sec": 3.0,
        },
        "minutes": round(args.seconds / 60, 2),
    }
    top = Path(tempfile.mkdtemp(prefix="chaos-"))
    top.chmod(0o755)  # the postgres user and the jobs' uids pass through it
    try:
        result.update(soak(args, plan, top, started))
    finally:
        if not args.keep:
            shutil.rmtree(top, ignore_errors=True)
        else:
            result["kept"] = str(top)
    return common.finish(result, started)


def soak(
    args: argparse.Namespace, plan: list[tuple[float, str]], top: Path, started: float
) -> dict[str, Any]:
    shared = top / "shared"
    (shared / "markers").mkdir(parents=True)
    for path in (shared, shared / "markers"):
        path.chmod(0o1777)  # every job writes here, each under a uid of its own
    (shared / "ledger").touch(0o666)
    (shared / "ledger").chmod(0o666)
    pg = Postgres(top / "pg")
    admin = pg.start()
    try:
        with fresh_database(admin) as url:
            return run_cluster(args, plan, top, shared, pg, url, started)
    finally:
        pg.stop()


def run_cluster(
    args: argparse.Namespace,
    plan: list[tuple[float, str]],
    top: Path,
    shared: Path,
    pg: Postgres,
    url: str,
    started: float,
) -> dict[str, Any]:
    cluster = Cluster(url, top, replicas=2)
    agents = [Agent(i, ",".join(cluster.urls), top, 3) for i in range(3)]
    supervisor = Supervisor(cluster, agents)
    api = Failover(cluster.urls)
    try:
        cluster.start_all(timeout=90)
        for agent in agents:
            agent.start()
        wait_nodes(api, 3, 90)
        supervisor.thread.start()
        faults = Faults(args.seed, plan, supervisor, pg, stop_sec=args.stop_sec)
        figures = work(args, shared, url, api, faults, started)
    finally:
        supervisor.stop.set()
        if supervisor.thread.is_alive():
            supervisor.thread.join(5)
        for agent in agents:
            agent.stop()
        cluster.stop_all()
    figures.update(
        {
            "replica_exits": supervisor.replica_exits,
            "agent_exits": supervisor.agent_exits,
            "restarts": supervisor.restarts,
            "requests_retried": api.retried,
        }
    )
    figures.update(unhandled([r.log_path for r in cluster.replicas] + [a.log_path for a in agents]))
    figures["ok"] = verdict(figures)
    return figures


def work(
    args: argparse.Namespace,
    shared: Path,
    url: str,
    api: Failover,
    faults: Faults,
    started: float,
) -> dict[str, Any]:
    """The work and the faults for ``args.seconds``, the drain, the checks."""
    supervisor = faults.supervisor
    submitter = Submitter(api, random.Random(args.seed), shared, args.rate, followers=6)
    pipelines = Pipelines(api, shared, 30.0 if args.seconds >= 300 else args.seconds / 3)
    session = SessionDriver(api, seconds=min(args.seconds * 0.6, 600.0))
    rss = RssSampler(supervisor.cluster, every=5.0 if args.seconds < 600 else 15.0)
    for part in (submitter, pipelines, session, faults, rss):
        part.thread.start()
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        time.sleep(min(30.0, max(0.0, deadline - time.monotonic())))
        leader = supervisor.cluster.leader()
        progress(
            started,
            submitted=submitter.submitted,
            acknowledged=len(submitter.acknowledged),
            faults=sum(faults.counts.values()),
            leader=leader.index if leader else None,
            restarts=supervisor.restarts,
            pipelines=len(pipelines.runs),
            session=session.phases[-1:] or None,
        )
    faults.finish()
    for part in (submitter, pipelines, session):
        part.stop.set()
    for part in (submitter, pipelines, session):
        part.thread.join(150)
    supervisor.check()
    drained = drain(api, url, submitter, pipelines, args.drain)
    progress(started, drained_in_s=drained)
    rss.stop.set()
    figures = check(api, url, shared / "ledger", submitter, pipelines, faults.windows)
    figures.update(
        {
            "drain_s": drained,
            "faults": faults.counts,
            "faults_skipped": faults.skipped,
            "fault_events": faults.events,
            "session": session.figures(),
            # a lineage is fitted after its first minute (start-up), over at least a
            # minute: a short run has no figure
            **rss.figures(warmup=60.0, least=60.0),
        }
    )
    return figures


def verdict(figures: dict[str, Any]) -> bool:
    follow = figures["followers"]
    return (
        figures["lost"] == 0
        and figures["doubled"] == 0
        and figures["stuck"] == 0
        and follow["missing"] == 0
        and follow["duplicated"] == 0
        and follow["out_of_order"] == 0
        and follow["unended"] == 0
    )


def wait_nodes(api: Failover, n: int, within: float) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        nodes = api.request("GET", "/v1/nodes").json()
        if sum(1 for node in nodes if node["status"] == "online") >= n:
            return
        time.sleep(0.5)
    raise RuntimeError(f"{n} agents not online after {within} s")


if __name__ == "__main__":
    main()
