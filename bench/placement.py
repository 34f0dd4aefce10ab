"""Placement decision time on fleets of 100 to 100,000 nodes of mixed shapes.

    python -m bench.placement [--decisions 3000] [--seed 7] [--per-stream 16]
        [--large-decisions N] [--no-owned-large] [--sustain-s 3]
    python bench/placement.py

For each fleet size: build the index, then make ``--decisions`` decisions with a mix of
job kinds (CPU, GPU, multi-GPU, arm64, capability, trusted 8-GPU, never placeable), each
placed job reserving its share and old ones finishing, so loads keep moving. Only
``place()`` is timed. Also measured: load updates (reserve/release), a 500-job ``plan()``
(reserving on the fleet, putting the loads back), the naive way (filter and score every
node) at each size, and,
at 1,000 nodes, how often the bounded candidate set picks the node that scoring every
feasible node would (and how close its score is).

``owned_10000``: the largest fleet again, its nodes owned by 100 orgs (a tenth universal,
owned by none) with 500 cross-org grants, and every job of a random org (the ``owner``
filter and the per-org class signatures at work).

``100000`` (``--large-decisions``, default ``--decisions``; 0 leaves it out) and
``owned_100000`` (the owned fleet at that size; ``--no-owned-large`` leaves it out): the
same at 100,000 nodes (10 naive decisions). On those and on ``owned_10000``,
``sustained``: ``--sustain-s`` seconds of decisions back to back over the live index,
each placed job reserving and old ones finishing as above (updates included in the
rate): decisions per second.

``preempt_10000`` (and ``preempt_1000``; ``--preempt-waiting 0`` leaves them out): the
fleet full of running preemptible low-priority jobs, and the cost of
``runplane.placement.preempt.choose`` per waiting high-priority job, alone and through the
placement actor's plan (``bench/placement_preempt.py``).

Prints ONE JSON object. About a minute and a half at the defaults (most of it
building the 100,000-node fleets); ``python -m bench placement --quick`` keeps under one.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from collections import deque
from dataclasses import replace
from pathlib import Path

if not __package__:  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runplane.placement import (
    DEFAULT_PER_STREAM,
    FleetIndex,
    Gpu,
    GpuRequirement,
    JobDemand,
    NodeLoad,
    NodeShape,
    Placement,
    Requires,
    Tier,
    first_rejection,
    place,
    plan,
    reference_place,
    score,
)

SIZES = (100, 1_000, 10_000)

RTX3060 = Gpu("RTX 3060", "nvidia", 12, "12.2")
RTX4090 = Gpu("RTX 4090", "nvidia", 24, "12.4")
L4 = Gpu("L4", "nvidia", 24, "12.10")
A100_40 = Gpu("A100 40GB", "nvidia", 40, "12.2")
A100_80 = Gpu("A100 80GB", "nvidia", 80, "12.4")
H100 = Gpu("H100", "nvidia", 80, "12.8")
MI250 = Gpu("MI250", "amd", 64, "")

# (weight, gpus, cpu core choices, GB RAM per core, arch, dlperf per node)
SHAPES: list[tuple[int, tuple[Gpu, ...], tuple[int, ...], int, str, float]] = [
    (22, (), (4, 8, 16), 4, "x86_64", 2.0),
    (12, (), (32, 64, 128), 4, "x86_64", 8.0),
    (9, (), (16, 32, 64), 4, "arm64", 5.0),
    (8, (RTX3060,), (8,), 4, "x86_64", 15.0),
    (10, (RTX4090,), (16,), 4, "x86_64", 45.0),
    (6, (RTX4090, RTX4090), (32,), 4, "x86_64", 90.0),
    (5, (L4, L4), (32,), 4, "x86_64", 60.0),
    (5, (A100_40,) * 4, (64,), 4, "x86_64", 280.0),
    (3, (A100_80,) * 8, (128,), 8, "x86_64", 640.0),
    (2, (H100,) * 8, (192,), 8, "x86_64", 1200.0),
    (3, (MI250, MI250), (64,), 4, "x86_64", 120.0),
    (3, (RTX4090, RTX3060), (24,), 4, "x86_64", 60.0),
]
CAPS = [
    frozenset(),
    frozenset({"docker"}),
    frozenset({"docker", "kvm"}),
    frozenset({"docker", "nvme"}),
    frozenset({"docker", "kvm", "nvme"}),
]


def make_node(i: int, rnd: random.Random) -> tuple[NodeShape, NodeLoad]:
    weights = [s[0] for s in SHAPES]
    _, gpus, core_choices, ram_per_core, arch, dlperf = rnd.choices(SHAPES, weights)[0]
    cores = rnd.choice(core_choices)
    slots = max(1, 2 * len(gpus)) if gpus else max(1, cores // 4)
    shape = NodeShape(
        id=f"node-{i:06d}",
        tier=rnd.choices(list(Tier), [55, 30, 15])[0],
        disabled=rnd.random() < 0.01,
        cpu_cores=cores,
        ram_gb=cores * ram_per_core,
        disk_gb=rnd.choice([200, 500, 1000, 4000]),
        gpus=gpus,
        arch=arch,
        capabilities=rnd.choice(CAPS),
        max_concurrency=slots,
        dlperf=round(dlperf * rnd.uniform(0.85, 1.15), 1),
        reliability=round(rnd.uniform(0.7, 1.0), 3),
    )
    busy = rnd.random()
    load = NodeLoad(
        used_cpu=round(cores * busy * 0.9),
        used_ram=round(shape.ram_gb * busy * 0.8),
        used_gpu=min(len(gpus), round(len(gpus) * busy)),
        active_jobs=min(slots, round(slots * busy)),
    )
    return shape, load


def gpu(n: int, **req: object) -> dict[str, object]:
    return {"gpu_count": n, "requires": Requires(gpu=GpuRequirement(required=True, **req))}  # type: ignore[arg-type]


# (weight, name, JobDemand keyword arguments)
JOB_KINDS: list[tuple[int, str, dict[str, object]]] = [
    (20, "default", {}),
    (15, "cpu_4c_batch", {"cpu_cores": 4, "ram_gb": 16, "weights_preset": "batch"}),
    (5, "cpu_32c", {"cpu_cores": 32, "ram_gb": 128}),
    (10, "gpu_any_interactive", {**gpu(1), "weights_preset": "interactive"}),
    (10, "gpu_24gb_training", {**gpu(1, min_vram_gb=24), "weights_preset": "training"}),
    (
        8,
        "gpu2_24gb_cuda",
        {**gpu(2, min_vram_gb=24, vendor="nvidia", cuda_min="12.2"), "weights_preset": "training"},
    ),
    (
        3,
        "gpu8_80gb_trusted",
        {
            "gpu_count": 8,
            "requires": Requires(gpu=GpuRequirement(min_vram_gb=80), min_tier=Tier.TRUSTED),
            "weights_preset": "training",
        },
    ),
    (
        8,
        "arm64_interactive",
        {"cpu_cores": 4, "requires": Requires(arch=("arm64",)), "weights_preset": "interactive"},
    ),
    (5, "kvm", {"cpu_cores": 2, "requires": Requires(capabilities=frozenset({"kvm"}))}),
    (5, "gpu_custom_weights", {**gpu(1), "weights": {"dlperf": 2.0, "spread": 1.0}}),
    (1, "never_placeable", {**gpu(1, vendor="intel")}),
]


def job_stream(rnd: random.Random, n: int) -> list[JobDemand]:
    weights = [k[0] for k in JOB_KINDS]
    out = []
    for i in range(n):
        _, name, kwargs = rnd.choices(JOB_KINDS, weights)[0]
        out.append(JobDemand(job_id=f"{name}-{i}", created_at=i, **kwargs))  # type: ignore[arg-type]
    return out


def summary(samples_ns: list[int]) -> dict[str, float]:
    us = sorted(s / 1000 for s in samples_ns)
    return {
        "p50_us": round(statistics.median(us), 1),
        "p99_us": round(us[min(len(us) - 1, int(len(us) * 0.99))], 1),
        "mean_us": round(statistics.fmean(us), 1),
        "max_us": round(us[-1], 1),
        "n": len(us),
    }


#: The owned-and-granted fleet: nodes across this many orgs (a tenth universal), this many
#: grants (an owner org lets another use all its nodes), jobs of random orgs.
OWNED_ORGS, OWNED_GRANTS = 100, 500


def owned_fleet(
    nodes: list[tuple[NodeShape, NodeLoad]], rnd: random.Random
) -> list[tuple[NodeShape, NodeLoad]]:
    """``nodes`` owned by ``OWNED_ORGS`` orgs (10 % universal) with ``OWNED_GRANTS`` grants."""
    grants: dict[str, set[str]] = {}
    for _ in range(OWNED_GRANTS):
        owner, grantee = rnd.sample(range(OWNED_ORGS), 2)
        grants.setdefault(f"org_{owner}", set()).add(f"org_{grantee}")
    out = []
    for shape, load in nodes:
        owner = None if rnd.random() < 0.1 else f"org_{rnd.randrange(OWNED_ORGS)}"
        granted = frozenset(grants.get(owner, ())) if owner else frozenset()
        out.append((replace(shape, owner=owner, grantees=granted), load))
    return out


def bench_size(
    size: int,
    decisions: int,
    seed: int,
    per_stream: int,
    *,
    owned: bool = False,
    sustain_s: float = 0.0,
    naive: int | None = None,
) -> dict[str, object]:
    """One fleet of ``size`` nodes: decisions timed one by one, then (``sustain_s``) a
    steady stream of decisions for that many seconds, then a 500-job ``plan`` and
    ``naive`` brute-force decisions (default: 200, 40 from 10,000 nodes)."""
    rnd = random.Random(seed + size)
    nodes = [make_node(i, rnd) for i in range(size)]
    if owned:
        nodes = owned_fleet(nodes, rnd)
    t0 = time.perf_counter()
    fleet = FleetIndex(nodes, per_stream=per_stream)
    build_s = time.perf_counter() - t0
    del nodes
    jobs = job_stream(rnd, decisions)
    if owned:
        jobs = [replace(j, org_id=f"org_{rnd.randrange(OWNED_ORGS)}") for j in jobs]
    for _, name, kwargs in JOB_KINDS:  # warm the per-signature caches
        place(JobDemand(job_id=f"warm-{name}", **kwargs), fleet)  # type: ignore[arg-type]
    steady = Steady(fleet, rnd, max(1, size // 2))
    timed = steady.timed(jobs)
    result: dict[str, object] = {"nodes": size, "build_ms": round(build_s * 1000, 1), **timed}
    if sustain_s:
        result["sustained"] = steady.sustain(jobs, sustain_s)

    queue = job_stream(random.Random(seed), 500)
    if owned:  # jobs of random orgs here too (every job the server places has an org)
        queue = [replace(j, org_id=f"org_{rnd.randrange(OWNED_ORGS)}") for j in queue]
    t = time.perf_counter()
    planned = plan(queue, fleet)
    plan_ms = (time.perf_counter() - t) * 1000
    result["plan_500_jobs"] = {
        "total_ms": round(plan_ms, 1),
        "per_job_us": round(plan_ms * 1000 / len(queue), 1),
        "assigned": len(planned.assignments),
        "waiting": len(planned.waiting),
    }
    pairs = list(fleet)
    naive_t = []
    for job in jobs[: naive if naive is not None else 40 if size >= 10_000 else 200]:
        t0_ns = time.perf_counter_ns()
        naive_place(job, pairs)
        naive_t.append(time.perf_counter_ns() - t0_ns)
    result["naive_decision"] = summary(naive_t) if naive_t else None
    stats = fleet.statistics()
    result.update(classes=stats.classes, shapes=stats.shapes, shelves=stats.shelves)
    return result


class Steady:
    """Decisions on ``fleet`` at a steady load: each placed job reserves its share, and
    old jobs finish (at most ``cap`` run; each decision releases the oldest with
    probability 1/2, repeatedly), so loads keep moving."""

    def __init__(self, fleet: FleetIndex, rnd: random.Random, cap: int) -> None:
        self.fleet, self.rnd, self.cap = fleet, rnd, cap
        self.running: deque[tuple[str, JobDemand]] = deque()

    def decide(self, job: JobDemand) -> object:
        result = place(job, self.fleet)
        if isinstance(result, Placement):
            self.fleet.reserve(result.node_id, job)
            self.running.append((result.node_id, job))
        self.settle()
        return result

    def settle(self) -> None:
        running, fleet = self.running, self.fleet
        while len(running) > self.cap or (running and self.rnd.random() < 0.5):
            node_id, done = running.popleft()
            fleet.release(node_id, done)

    def timed(self, jobs: list[JobDemand]) -> dict[str, object]:
        """Each ``place`` timed alone; load updates timed apart."""
        fleet, clock = self.fleet, time.perf_counter_ns
        times: list[int] = []
        placed_t: list[int] = []
        waiting_t: list[int] = []
        update_t: list[int] = []
        outcomes = {"placed": 0, "waiting_static": 0, "waiting_busy": 0}
        for job in jobs:
            t = clock()
            result = place(job, fleet)
            dt = clock() - t
            times.append(dt)
            if isinstance(result, Placement):
                outcomes["placed"] += 1
                placed_t.append(dt)
                t = clock()
                fleet.reserve(result.node_id, job)
                update_t.append(clock() - t)
                self.running.append((result.node_id, job))
            else:
                outcomes["waiting_static" if result.static else "waiting_busy"] += 1
                waiting_t.append(dt)
            running = self.running
            while len(running) > self.cap or (running and self.rnd.random() < 0.5):
                node_id, done = running.popleft()
                t = clock()
                fleet.release(node_id, done)
                update_t.append(clock() - t)
        return {
            "decision": summary(times),
            "decision_placed": summary(placed_t) if placed_t else None,
            "decision_waiting": summary(waiting_t) if waiting_t else None,
            "outcomes": outcomes,
            "load_update": summary(update_t),
        }

    def sustain(self, jobs: list[JobDemand], seconds: float) -> dict[str, object]:
        """Decisions back to back for ``seconds`` (the job mix again and again), each
        with its reservation and the releases that keep the load steady: decisions/s
        over the whole stretch, updates included."""
        done = placed = 0
        started = time.perf_counter()
        deadline = started + seconds
        while time.perf_counter() < deadline:
            for _ in range(50):
                placed += isinstance(self.decide(jobs[done % len(jobs)]), Placement)
                done += 1
        elapsed = time.perf_counter() - started
        return {
            "seconds": round(elapsed, 2),
            "decisions": done,
            "placed": placed,
            "decisions_per_s": round(done / elapsed),
        }


def naive_place(job: JobDemand, pairs: list[tuple[NodeShape, NodeLoad]]) -> str | None:
    """The approach the index avoids: filter and score every node."""
    best: tuple[float, str] | None = None
    for node, load in pairs:
        if first_rejection(node, load, job) is None:
            s = score(node, load, job)
            if best is None or s > best[0] or (s == best[0] and node.id < best[1]):
                best = (s, node.id)
    return best[1] if best else None


def quality(decisions: int, seed: int, per_stream: int) -> dict[str, object]:
    """Bounded candidates vs scoring every feasible node, at 1,000 nodes, loads moving."""
    rnd = random.Random(seed)
    fleet = FleetIndex((make_node(i, rnd) for i in range(1_000)), per_stream=per_stream)
    running: deque[tuple[str, JobDemand]] = deque()
    same = 0
    ratios = []
    for job in job_stream(rnd, decisions):
        got = place(job, fleet)
        best = reference_place(job, list(fleet), per_stream=1 << 30)
        if not isinstance(got, Placement) or not isinstance(best, Placement):
            continue
        same += got.node_id == best.node_id
        ratios.append(got.score / best.score if best.score else 1.0)
        fleet.reserve(got.node_id, job)
        running.append((got.node_id, job))
        while len(running) > 500 or (running and rnd.random() < 0.5):
            node_id, done = running.popleft()
            fleet.release(node_id, done)
    return {
        "decisions_compared": len(ratios),
        "same_node_pct": round(100 * same / max(len(ratios), 1), 1),
        "mean_score_ratio": round(statistics.fmean(ratios), 4) if ratios else None,
        "min_score_ratio": round(min(ratios), 4) if ratios else None,
    }


#: The large fleet (plain, and owned when ``--owned-large``) and the seconds of
#: back-to-back decisions measured on it and on the owned 10,000.
LARGE = 100_000
SUSTAIN_S = 3.0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decisions", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--per-stream", type=int, default=DEFAULT_PER_STREAM)
    parser.add_argument("--preempt-waiting", type=int, default=40)
    parser.add_argument(
        "--large-decisions", type=int, default=None, help="at 100,000 nodes (0: skip them)"
    )
    parser.add_argument("--owned-large", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--sustain-s", type=float, default=SUSTAIN_S)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    sizes = {str(n): bench_size(n, args.decisions, args.seed, args.per_stream) for n in SIZES}
    small, large = sizes[str(SIZES[0])], sizes[str(SIZES[-1])]
    growth = {
        "p50": round(large["decision"]["p50_us"] / small["decision"]["p50_us"], 2),  # type: ignore[index]
        "mean": round(large["decision"]["mean_us"] / small["decision"]["mean_us"], 2),  # type: ignore[index]
        "nodes": SIZES[-1] // SIZES[0],
    }
    result: dict[str, object] = {
        "bench": "placement",
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "cores": os.cpu_count(),
        "decisions_per_size": args.decisions,
        "per_stream": args.per_stream,
        "sizes": sizes,
        "growth_ratio_100_to_10000": growth,
        "quality_1000_nodes": quality(400, args.seed, args.per_stream),
        # nodes owned by 100 orgs (a tenth universal) with 500 grants; jobs of random orgs
        "owned_10000": bench_size(
            SIZES[-1],
            args.decisions,
            args.seed,
            args.per_stream,
            owned=True,
            sustain_s=args.sustain_s,
        ),
    }
    large_decisions = args.decisions if args.large_decisions is None else args.large_decisions
    result["decisions_large"] = large_decisions
    if large_decisions:
        kinds = [("", False)] + ([("owned_", True)] if args.owned_large else [])
        for prefix, owned in kinds:
            result[f"{prefix}{LARGE}"] = bench_size(
                LARGE,
                large_decisions,
                args.seed,
                args.per_stream,
                owned=owned,
                sustain_s=args.sustain_s,
                naive=10,
            )
    if args.preempt_waiting:
        from bench.placement_preempt import bench_preempt

        for n in SIZES[1:]:
            result[f"preempt_{n}"] = bench_preempt(n, args.preempt_waiting, args.seed)
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
