"""Preemption decision cost on a full fleet (``bench/placement.py``'s ``preempt_10000``).

    python -m bench.placement_preempt [--nodes 10000] [--waiting 40] [--seed 7]

A fleet of the placement benchmark's mixed shapes (``bench/placement.py``), every node
full: its slots taken by running preemptible jobs of priority 0-49 (one org, so every
node is a candidate: the worst case for :func:`runplane.placement.preempt.choose`), each
reserving an equal share of the node's cores and RAM (and one GPU each while GPUs last),
kept as placement keeps them (:class:`~runplane.placement.preempt.Preemptibles` of
:class:`~runplane.placement.preempt.Running`). Then ``--waiting`` jobs of the benchmark's
job kinds at priority 200 (the never-placeable kind left out), each timed through
``choose`` alone (none is carried out: the fleet stays full, so every decision searches
it all), and through the placement actor's own path: its ``_plan`` (``plan_groups`` over
the queue, every job waiting, then ``_preempt``: the head of each waiting group, at most
``PREEMPT_GROUPS``, looks for a preemption and the hold starts), on a
``PlacementActor`` whose hand-overs and preemption orders are not sent.

Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

if not __package__:  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio

from bench.placement import JOB_KINDS, make_node, summary
from runplane.actors.placement import PREEMPT_GROUPS, Handover, PlacementActor
from runplane.placement import DEFAULT_PER_STREAM, FleetIndex, JobDemand, NodeLoad, NodeShape
from runplane.placement.preempt import EXACT_UP_TO, Preemptibles, Preemption, Running, choose

ORG = "org_bench"
#: the waiting jobs' priority; the running ones' are below 50
HIGH = 200
TARGET_P99_US = 2000.0


def fill(shape: NodeShape, rnd: random.Random, started: int) -> tuple[NodeLoad, list[Running], int]:
    """``shape`` full of preemptible jobs: its load, the jobs, the next start number."""
    slots = max(1, shape.max_concurrency)
    cpu = max(0.25, shape.cpu_cores // slots)
    ram = max(0.25, shape.ram_gb // slots)
    load = NodeLoad()
    jobs: list[Running] = []
    for k in range(slots):
        demand = JobDemand(
            job_id=f"low-{shape.id}-{k}",
            priority=rnd.randrange(50),
            cpu_cores=cpu,
            ram_gb=ram,
            gpu_count=1 if k < len(shape.gpus) else 0,
            org_id=ORG,
            preemptible=True,
            preempt_grace_sec=30,
        )
        load = load.plus(demand.cpu, demand.ram, demand.gpus, 1, ORG)
        started += 1
        jobs.append(Running(demand, shape.id, started))
    return load, jobs, started


def full_fleet(size: int, seed: int) -> tuple[FleetIndex, Preemptibles, dict[str, int]]:
    rnd = random.Random(seed + size)
    nodes: list[tuple[NodeShape, NodeLoad]] = []
    running = Preemptibles()
    started = 0
    for i in range(size):
        shape, _ = make_node(i, rnd)
        load, jobs, started = fill(shape, rnd, started)
        nodes.append((shape, load))
        for job in jobs:
            running.add(job)
    per_node = [n.max_concurrency for n, _ in nodes]
    fleet = FleetIndex(nodes, per_stream=DEFAULT_PER_STREAM)
    stats = {
        "running": len(running),
        "per_node_max": max(per_node),
        "nodes_over_exact": sum(1 for k in per_node if k > EXACT_UP_TO),
    }
    return fleet, running, stats


def waiting_jobs(n: int, seed: int) -> list[JobDemand]:
    rnd = random.Random(seed)
    kinds = [k for k in JOB_KINDS if k[1] != "never_placeable"]
    weights = [k[0] for k in kinds]
    out = []
    for i in range(n):
        _, name, kwargs = rnd.choices(kinds, weights)[0]
        out.append(
            JobDemand(job_id=f"high-{name}-{i}", priority=HIGH, created_at=i, org_id=ORG, **kwargs)  # type: ignore[arg-type]
        )
    return out


def time_choose(
    jobs: list[JobDemand], fleet: FleetIndex, running: Preemptibles
) -> tuple[list[int], dict[str, Any]]:
    times: list[int] = []
    found = victims = 0
    clock = time.perf_counter_ns
    for job in jobs:
        t = clock()
        got = choose(job, fleet, running)
        times.append(clock() - t)
        if isinstance(got, Preemption):
            found += 1
            victims += len(got.victims)
    return times, {"found": found, "victims_per_preemption": round(victims / max(found, 1), 2)}


class _Context:
    """What ``_plan`` uses of an actor context: hand-overs and orders are not sent."""

    def start_soon(self, fn: Any, *args: object) -> None:
        pass

    def tell_after(self, delay: float, msg: object) -> None:
        pass


async def _actor_path(
    jobs: list[JobDemand], fleet: FleetIndex, running: Preemptibles
) -> dict[str, Any]:
    async def assign(job_id: str, node_id: str) -> Handover:
        return Handover(taken=False)

    async def preempt(victim: str, by: str, grace: int) -> bool:
        return True

    actor = PlacementActor(store=None, assign=assign, fleet=fleet, preempt=preempt)  # type: ignore[arg-type]
    actor._context = _Context()  # type: ignore[assignment]
    actor.weights_from_store = False
    actor.running = running
    for node_id, on_node in running.nodes():
        for r in on_node:
            actor.placed[r.job_id] = (node_id, r.demand)
    for job in jobs:
        actor.queue.add(job)
    actor.changed = True
    t = time.perf_counter()
    actor._plan()
    whole = time.perf_counter() - t
    return {
        "queued": len(jobs),
        "plan_and_preempt_ms": round(whole * 1000, 1),
        "holds_started": len(actor.holds),
        "preempt_groups_cap": PREEMPT_GROUPS,
    }


def bench_preempt(size: int, waiting: int, seed: int) -> dict[str, Any]:
    t = time.perf_counter()
    fleet, running, stats = full_fleet(size, seed)
    build_s = time.perf_counter() - t
    jobs = waiting_jobs(waiting, seed)
    times, outcome = time_choose(jobs, fleet, running)
    total_s = sum(times) / 1e9
    decision = summary(times)
    actor = trio.run(_actor_path, jobs, fleet, running)
    return {
        "nodes": size,
        **stats,
        "build_ms": round(build_s * 1000, 1),
        "waiting_jobs": len(jobs),
        "choose": decision,
        "decisions_per_s": round(len(times) / total_s, 1) if total_s else None,
        **outcome,
        "actor_plan": actor,
        "target_p99_us": TARGET_P99_US,
        "p99_under_target": decision["p99_us"] < TARGET_P99_US,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--waiting", type=int, default=40)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    result = bench_preempt(args.nodes, args.waiting, args.seed)
    print(json.dumps({"bench": "placement_preempt", **result}))


if __name__ == "__main__":
    main()
