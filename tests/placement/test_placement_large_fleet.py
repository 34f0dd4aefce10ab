"""Round 3's placement levers pick what the plain walks picked (fixed seeds, random fleets).

* ``fit_items``: a ``fit`` walk without a budget jumps over runs of nodes short of RAM;
  it must leave out only such nodes, so the ``fit`` stream takes the same nodes.
* A scan of several owners' all-nodes shelves (an owned fleet) goes through
  ``walks.merge``: every way of walking must still give the brute-force outcome, on
  fleets large and RAM-starved enough that long short-of-RAM runs occur.
"""

from __future__ import annotations

import random

import pytest
from sortedcontainers import SortedList

from runplane.placement import (
    FleetIndex,
    Gpu,
    GpuRequirement,
    JobDemand,
    NodeLoad,
    NodeShape,
    Placement,
    Requires,
    Tier,
    place,
    reference_place,
    reference_stream_takes,
)
from runplane.placement.shelves import JUMP_OVER, Item, fit_items

A = Gpu("A", "nvidia", 24, "12.2")
B = Gpu("B", "nvidia", 80, "12.4")
GPU_SETS: list[tuple[Gpu, ...]] = [(), (), (), (A,), (A, A), (B, B, B, B)]
ORGS = [f"org_{i}" for i in range(12)]


@pytest.mark.parametrize("seed", range(40))
def test_fit_items_leaves_out_only_nodes_short_of_ram(seed: int) -> None:
    rnd = random.Random(seed)
    lst: SortedList[Item] = SortedList()
    for i in range(rnd.choice([0, 5, 50, 400])):
        # few distinct CPU counts, so runs of one CPU count short of RAM are long
        lst.add((rnd.choice([1, 2, 4, 4.0, 8, 16]), rnd.randrange(0, 64), f"n{i:04d}"))
    cpu, ram = rnd.choice([0, 1, 2, 4, 8]), rnd.choice([0.5, 8, 16, 32, 63])
    walked = list(fit_items(lst, cpu, ram))
    every = list(lst.irange((cpu,)))
    assert walked == sorted(walked)
    assert set(walked) <= set(every)
    # the ones left out are all short of RAM, the ones with enough RAM all there, in order
    assert all(item[1] < ram for item in set(every) - set(walked))
    assert [i for i in walked if i[1] >= ram] == [i for i in every if i[1] >= ram]


def test_fit_items_jumps_over_a_long_run() -> None:
    lst: SortedList[Item] = SortedList((4, r, f"n{r:03d}") for r in range(100))
    lst.update((8, r, f"m{r:03d}") for r in range(100))
    walked = list(fit_items(lst, 4, 90))
    # the run of 8-core nodes below 90 GB is jumped over, not walked
    assert [i[1] for i in walked] == [*range(90, 100), *range(90, 100)]
    assert len(walked) < len(lst) - JUMP_OVER


def fleet(rnd: random.Random, n: int, owned: bool) -> list[tuple[NodeShape, NodeLoad]]:
    grants = {org: frozenset(rnd.sample(ORGS, 3)) - {org} for org in ORGS}
    out = []
    for i in range(n):
        gpus = rnd.choice(GPU_SETS)
        cores = rnd.choice([4, 8, 16, 32])
        owner = None if not owned or rnd.random() < 0.2 else rnd.choice(ORGS)
        shape = NodeShape(
            id=f"node-{i:05d}",
            tier=rnd.choice(list(Tier)),
            cpu_cores=cores,
            ram_gb=cores * 4,
            disk_gb=500,
            gpus=gpus,
            capabilities=rnd.choice([frozenset(), frozenset({"kvm"})]),
            max_concurrency=max(2, 2 * len(gpus)),
            dlperf=rnd.uniform(1, 100),
            reliability=rnd.uniform(0.5, 1),
            owner=owner,
            grantees=grants[owner] if owner else frozenset(),
        )
        busy = rnd.random()
        # RAM busier than CPU: many nodes have CPU free and too little RAM
        load = NodeLoad(
            used_cpu=round(cores * busy * 0.5),
            used_ram=round(shape.ram_gb * min(1.0, busy * 1.4)),
            used_gpu=round(len(gpus) * busy * 0.5),
            active_jobs=rnd.randrange(0, 2),
        )
        out.append((shape, load))
    return out


def job(rnd: random.Random, i: int, owned: bool) -> JobDemand:
    kind = rnd.randrange(4)
    gpu = Requires(gpu=GpuRequirement(required=True))
    return JobDemand(
        job_id=f"j{i}",
        cpu_cores=rnd.choice([1, 2, 4, 8]),
        ram_gb=rnd.choice([0, 4, 8, 16, 30]),
        gpu_count=1 if kind == 1 else 2 if kind == 2 else 0,
        requires=gpu if kind in (1, 2) else Requires(),
        weights_preset=rnd.choice([None, "training", "batch", "interactive"]),
        org_id=rnd.choice(ORGS) if owned else None,
        created_at=i,
    )


@pytest.mark.parametrize("owned", [False, True], ids=["plain", "owned"])
@pytest.mark.parametrize("walk", ["auto", "scan", "merge"])
def test_placement_on_ram_starved_fleets_matches_brute_force(owned: bool, walk: str) -> None:
    rnd = random.Random(42 if owned else 7)
    nodes = fleet(rnd, 1500, owned)
    index = FleetIndex(nodes, walk=walk)  # type: ignore[arg-type]
    placed = 0
    for i in range(40):
        demand = job(rnd, i, owned)
        pairs = list(index)
        want_takes = reference_stream_takes(demand, pairs)
        got_takes = {s: ids for s, ids in index.stream_takes(demand).items() if ids}
        assert got_takes == {s: [n.id for n, _ in t] for s, t in want_takes.items() if t}
        got = place(demand, index)
        assert got == reference_place(demand, pairs)
        if isinstance(got, Placement):  # the loads move on
            placed += 1
            index.reserve(got.node_id, demand)
    assert placed > 10
