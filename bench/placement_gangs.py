"""Placement decisions with gangs (multi-node jobs) at 10,000 nodes of mixed shapes.

    python -m bench placement_gangs [--quick]
    python -m bench.placement_gangs [--decisions 5000] [--gangs 0.01] [--seed 7]

The fleet and the job mix of ``bench/placement.py`` (its steady-state loads: placed jobs
reserve, old ones finish), with a share of the jobs (``--gangs``, 1 %) gangs of 2 to 8
ranks (docs/placement.md "Gangs"): each decision is ``place()`` (a gang's places every
rank on distinct nodes, or none), timed alone; a placed gang reserves on every rank's
node. Reported: decisions/s, p50/p99 of all decisions, of gangs and of plain jobs, the
same plain stream with no gangs (the 1-rank path's cost, to compare), and a 500-job
``plan()`` with the same share of gangs. Target: p99 < 2 ms at 10,000 nodes with 1 %
gangs. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

if not __package__:  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common
from bench.placement import JOB_KINDS, job_stream, make_node, summary
from runplane.placement import FleetIndex, JobDemand, Unplaced, place, plan
from runplane.placement.gang import GangPlacement

NODES = 10_000
TARGET_P99_US = 2000.0


def with_gangs(jobs: list[JobDemand], share: float, rnd: random.Random) -> list[JobDemand]:
    """``jobs`` with about ``share`` of them made gangs of 2-8 ranks."""
    return [replace(j, nodes=rnd.randint(2, 8)) if rnd.random() < share else j for j in jobs]


def run(nodes: int, decisions: int, share: float, seed: int) -> dict[str, object]:
    rnd = random.Random(seed + nodes)
    fleet = FleetIndex([make_node(i, rnd) for i in range(nodes)])
    for _, name, kwargs in JOB_KINDS:  # warm the per-signature caches
        place(JobDemand(job_id=f"warm-{name}", **kwargs), fleet)  # type: ignore[arg-type]
    jobs = with_gangs(job_stream(rnd, decisions), share, rnd)
    running: deque[tuple[tuple[str, ...], JobDemand]] = deque()
    cap = max(1, nodes // 2)
    every: list[int] = []
    gangs: list[int] = []
    plain: list[int] = []
    outcomes = {"placed": 0, "gangs_placed": 0, "gangs_waiting": 0, "waiting": 0}
    clock = time.perf_counter_ns
    started = clock()
    for job in jobs:
        t = clock()
        result = place(job, fleet)
        dt = clock() - t
        every.append(dt)
        (gangs if job.nodes > 1 else plain).append(dt)
        if isinstance(result, Unplaced):
            outcomes["gangs_waiting" if job.nodes > 1 else "waiting"] += 1
        else:
            held = result.node_ids if isinstance(result, GangPlacement) else (result.node_id,)
            for node_id in held:
                fleet.reserve(node_id, job)
            running.append((held, job))
            outcomes["gangs_placed" if job.nodes > 1 else "placed"] += 1
        while len(running) > cap or (running and rnd.random() < 0.5):
            held, done = running.popleft()
            for node_id in held:
                fleet.release(node_id, done)
    total_s = (clock() - started) / 1e9
    queue = with_gangs(job_stream(random.Random(seed), 500), share, random.Random(seed + 1))
    t0 = time.perf_counter()
    planned = plan(queue, fleet)
    plan_ms = (time.perf_counter() - t0) * 1000
    return {
        "decisions_per_s": round(len(every) / total_s),
        "decision": summary(every),
        "gang_decision": summary(gangs) if gangs else None,
        "plain_decision": summary(plain),
        "outcomes": outcomes,
        "plan_500_ms": round(plan_ms, 2),
        "plan_500_assigned": len(planned.assignments),
    }


def main(argv: list[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--decisions", type=int, default=None)
    parser.add_argument("--gangs", type=float, default=0.01)
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    decisions = args.decisions or (2000 if args.quick else 5000)
    mixed = run(args.nodes, decisions, args.gangs, args.seed)
    no_gangs = run(args.nodes, decisions, 0.0, args.seed)
    p99 = mixed["decision"]["p99_us"]  # type: ignore[index]
    result = {
        "bench": "placement_gangs",
        "machine": common.machine(),
        "settings": {"nodes": args.nodes, "decisions": decisions, "gang_share": args.gangs},
        "decisions_per_s": mixed["decisions_per_s"],
        "decision_p50_us": mixed["decision"]["p50_us"],  # type: ignore[index]
        "decision_p99_us": p99,
        "with_gangs": mixed,
        "without_gangs": no_gangs,
        "targets": {"p99_under_2ms": p99 < TARGET_P99_US},
    }
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
