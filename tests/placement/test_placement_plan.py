"""Decisions over a queue: order, competition for the last slot, wait reasons."""

from __future__ import annotations

from typing import Any

import pytest

from runplane.placement import (
    ARCH,
    CPU_FREE,
    DISABLED,
    GPU_FREE,
    GPU_VRAM,
    NO_GPU,
    OTHER_ORG,
    SLOTS_FULL,
    Assignment,
    FleetIndex,
    Gpu,
    GpuRequirement,
    JobDemand,
    NodeLoad,
    NodeShape,
    Placement,
    Requires,
    Unplaced,
    explain,
    place,
    plan,
    queue_order,
    reference_place,
)

RTX = Gpu("RTX 4090", "nvidia", 24, "12.4")
SMALL = Gpu("RTX 3060", "nvidia", 12, "12.2")


def n(node_id: str, **kw: Any) -> NodeShape:
    base: dict[str, Any] = {"cpu_cores": 16, "ram_gb": 64, "max_concurrency": 4}
    base.update(kw)
    return NodeShape(node_id, **base)


def j(job_id: str, **kw: Any) -> JobDemand:
    return JobDemand(job_id, **kw)


def vram_job(job_id: str, count: int, vram: float, **kw: Any) -> JobDemand:
    req = Requires(gpu=GpuRequirement(required=True, min_vram_gb=vram))
    return JobDemand(job_id, gpu_count=count, requires=req, **kw)


@pytest.mark.parametrize(
    ("jobs", "order"),
    [
        ([j("a", priority=100), j("b", priority=200), j("c", priority=50)], ["b", "a", "c"]),
        ([j("a", created_at=3), j("b", created_at=1), j("c", created_at=2)], ["b", "c", "a"]),
        (
            [j("old-low", priority=10, created_at=0), j("new-high", priority=90, created_at=9)],
            ["new-high", "old-low"],
        ),
        ([j("b", created_at=1), j("a", created_at=1)], ["a", "b"]),  # full tie: job id
    ],
)
def test_queue_order_is_priority_then_age(jobs: list[JobDemand], order: list[str]) -> None:
    assert [job.job_id for job in queue_order(jobs)] == order


def test_two_jobs_for_the_last_slot_only_the_first_in_order_gets_it() -> None:
    fleet = FleetIndex([(n("only", max_concurrency=2), NodeLoad(active_jobs=1))])
    result = plan([j("low", priority=10), j("high", priority=500)], fleet)
    assert [a.job_id for a in result.assignments] == ["high"]
    waiting = result.waiting["low"]
    assert not waiting.static
    assert waiting.counts == {SLOTS_FULL: 1}
    assert waiting.reason == (
        "waiting for free capacity: 1 node matches but is busy (1 node has no free job slot)"
    )


def test_two_jobs_for_the_last_gpu_same_priority_oldest_wins() -> None:
    fleet = FleetIndex([(n("g", gpus=(RTX, RTX)), NodeLoad(used_gpu=1))])
    queue = [j("young", gpu_count=1, created_at=20), j("old", gpu_count=1, created_at=10)]
    result = plan(queue, fleet)
    assert result.assignments == [Assignment("old", "g", result.assignments[0].score, 1, 2, 1)]
    assert result.waiting["young"].counts == {GPU_FREE: 1}
    assert result.loads == {"g": NodeLoad(used_cpu=1, used_ram=2, used_gpu=2, active_jobs=1)}


def test_plan_counts_cpu_and_ram_of_earlier_assignments() -> None:
    fleet = FleetIndex([n("a", cpu_cores=8, max_concurrency=10)])
    result = plan([j(f"j{i}", cpu_cores=3, created_at=i) for i in range(3)], fleet)
    assert [a.job_id for a in result.assignments] == ["j0", "j1"]
    assert result.waiting["j2"].counts == {CPU_FREE: 1}


def test_plan_does_not_touch_the_given_fleet() -> None:
    fleet = FleetIndex([n("a"), n("b", gpus=(RTX,))])
    before = sorted(fleet, key=lambda p: p[0].id)
    result = plan([j(f"j{i}") for i in range(5)], fleet)
    assert len(result.assignments) == 5
    assert sorted(fleet, key=lambda p: p[0].id) == before
    # The committer applies the plan; the same loads come out.
    for a in result.assignments:
        fleet.reserve(a.node_id, j(a.job_id))
    assert {nid: fleet.load(nid) for nid in result.loads} == result.loads


def test_plan_backfills_smaller_jobs_behind_a_waiting_big_one() -> None:
    fleet = FleetIndex([(n("a", cpu_cores=8), NodeLoad(used_cpu=4))])
    result = plan([j("big", cpu_cores=8, priority=200), j("small", cpu_cores=2)], fleet)
    assert [a.job_id for a in result.assignments] == ["small"]
    assert result.waiting["big"].counts == {CPU_FREE: 1}


def test_identical_waiting_jobs_share_one_outcome() -> None:
    fleet = FleetIndex([(n("a"), NodeLoad(active_jobs=4))])
    result = plan([j(f"j{i}", created_at=i) for i in range(50)], fleet)
    assert not result.assignments
    outcomes = {id(o) for o in result.waiting.values()}
    assert len(result.waiting) == 50 and len(outcomes) == 1


def test_disabled_node_is_skipped_even_when_it_would_win() -> None:
    fleet = FleetIndex([n("best", disabled=True, reliability=1.0), n("ok", reliability=0.2)])
    result = place(j("x", weights={"reliability": 1}), fleet)
    assert isinstance(result, Placement) and result.node_id == "ok"


def test_only_disabled_nodes_is_a_static_wait() -> None:
    result = place(j("x"), FleetIndex([n("a", disabled=True), n("b", disabled=True)]))
    assert isinstance(result, Unplaced)
    assert result.static
    assert result.counts == {DISABLED: 2}
    assert result.reason == "no node meets: an enabled node (2 nodes are disabled)"


def test_unplaceable_reason_names_the_requirement() -> None:
    fleet = FleetIndex(
        [n(f"small{i}", gpus=(SMALL,)) for i in range(40)]
        + [n(f"arm{i}", arch="arm64") for i in range(3)]
    )
    result = place(vram_job("x", 2, 24), fleet)
    assert isinstance(result, Unplaced)
    assert result.static
    assert result.counts == {NO_GPU: 3, "GPU_COUNT": 40}
    assert result.reason == (
        "no node meets: 2 GPUs with >= 24 GB VRAM (40 nodes have fewer GPUs, 3 nodes have no GPU)"
    )


def test_unplaceable_reason_lists_several_requirements() -> None:
    fleet = FleetIndex(
        [n(f"g{i}", gpus=(SMALL,)) for i in range(40)] + [n(f"x{i}") for i in range(12)]
    )
    job = JobDemand(
        "x", gpu_count=1, requires=Requires(arch=("arm64",), gpu=GpuRequirement(min_vram_gb=24))
    )
    result = place(job, fleet)
    assert isinstance(result, Unplaced)
    assert result.counts == {ARCH: 52}
    assert result.reason == "no node meets: arch arm64 (52 nodes have another arch)"
    fleet.upsert(n("arm", arch="arm64", gpus=(SMALL,)))
    result = place(job, fleet)
    assert isinstance(result, Unplaced)
    assert result.counts == {ARCH: 52, GPU_VRAM: 1}
    assert result.reason == (
        "no node meets: arch arm64 (52 nodes have another arch), "
        "1 GPU with >= 24 GB VRAM (1 node has smaller GPUs)"
    )


def test_static_versus_momentary() -> None:
    fleet = FleetIndex(
        [(n(f"busy{i}", gpus=(RTX, RTX)), NodeLoad(used_gpu=2)) for i in range(3)]
        + [n(f"one{i}", gpus=(RTX,)) for i in range(2)]
    )
    never = place(vram_job("never", 4, 24), fleet)
    assert isinstance(never, Unplaced) and never.static and never.matching == 0
    later = place(vram_job("later", 2, 24), fleet)
    assert isinstance(later, Unplaced) and not later.static
    assert later.matching == 3
    assert later.counts == {"GPU_COUNT": 2, GPU_FREE: 3}
    assert later.reason == (
        "waiting for free capacity: 3 nodes match but are busy "
        "(3 nodes have fewer than 2 matching GPUs free)"
    )
    # The momentary breakdown can be skipped (it costs a pass over the matching nodes).
    quick = place(vram_job("later", 2, 24), fleet, explain=False)
    assert isinstance(quick, Unplaced)
    assert (quick.static, quick.matching, quick.counts) == (False, 3, {"GPU_COUNT": 2})
    assert quick.reason == "waiting for free capacity: 3 nodes match but are busy"
    # Once a GPU frees up the same job is placed.
    fleet.update_load("busy1", NodeLoad(used_gpu=0))
    placed = place(vram_job("later", 2, 24), fleet)
    assert isinstance(placed, Placement) and placed.node_id == "busy1"


def test_empty_fleet() -> None:
    result = place(j("x"), FleetIndex())
    assert result == Unplaced("no nodes in the fleet", True, {}, 0)
    assert plan([j("x")], FleetIndex()).waiting["x"].static


@pytest.mark.parametrize(
    ("counts", "job", "sentence"),
    [
        (
            {"GPU_VRAM": 40, "ARCH": 12},
            JobDemand(
                "x",
                gpu_count=1,
                requires=Requires(arch=("arm64",), gpu=GpuRequirement(min_vram_gb=24)),
            ),
            "no node meets: 1 GPU with >= 24 GB VRAM (40 nodes have smaller GPUs), "
            "arch arm64 (12 nodes have another arch)",
        ),
        (
            {"TRUST_TIER": 1, "CAPABILITY": 2, "CPU": 3},
            JobDemand(
                "x",
                cpu_cores=64,
                requires=Requires(min_tier="trusted", capabilities=frozenset({"kvm", "ib"})),  # type: ignore[arg-type]
            ),
            "no node meets: 64 CPU cores (3 nodes have fewer CPU cores), "
            "capabilities ib and kvm (2 nodes lack them), "
            "trust tier trusted or higher (1 node is of a lower tier)",
        ),
        (
            {"SLOTS_FULL": 2, "RAM_FREE": 1, "ARCH": 5},
            JobDemand("x", ram_gb=4),
            "waiting for free capacity: 3 nodes match but are busy "
            "(2 nodes have no free job slot, 1 node has less than 4 GB RAM free)",
        ),
        (
            {"DISK": 1, "NO_SLOTS": 1, "RAM": 1},
            JobDemand("x", requires=Requires(min_disk_gb=200, min_ram_gb=8)),
            "no node meets: 8 GB RAM (1 node has less RAM), 200 GB disk (1 node has less "
            "disk), a job slot (1 node accepts no jobs)",
        ),
        (
            {"GPU_VENDOR": 2, "CUDA_VERSION": 1},
            JobDemand(
                "x",
                gpu_count=2,
                requires=Requires(gpu=GpuRequirement(vendor="nvidia", cuda_min="12.4")),
            ),
            "no node meets: 2 GPUs, from nvidia, with CUDA >= 12.4 "
            "(2 nodes have GPUs of another vendor, 1 node has an older CUDA)",
        ),
    ],
)
def test_explain_turns_counts_into_one_sentence(
    counts: dict[str, int], job: JobDemand, sentence: str
) -> None:
    assert explain(counts, job) == sentence


def test_a_node_whose_jobs_share_one_uid_runs_one_org_at_a_time() -> None:
    shared = n("shared", max_concurrency=4)
    own_uids = n("own-uids", max_concurrency=4, capabilities={"uid-per-job"})
    busy = NodeLoad(used_cpu=1, used_ram=2, active_jobs=1, orgs=(("org_b", 1),))
    fleet = FleetIndex([(shared, busy)])
    result = plan([j("a1", org_id="org_a"), j("b2", org_id="org_b")], fleet)
    assert [(a.job_id, a.node_id) for a in result.assignments] == [("b2", "shared")]
    waiting = result.waiting["a1"]
    assert not waiting.static
    assert waiting.counts == {OTHER_ORG: 1}
    assert waiting.reason == (
        "waiting for free capacity: 1 node matches but is busy (1 node runs another org's "
        "jobs (one org at a time: its jobs share one uid))"
    )
    # the last job of the other org gone, the node takes the first org's
    fleet.release("shared", j("b1", org_id="org_b"))
    assert fleet.load("shared").orgs == ()
    assert [a.node_id for a in plan([j("a1", org_id="org_a")], fleet).assignments] == ["shared"]
    # a node giving each job its own uid mixes orgs
    mixed = FleetIndex([(own_uids, busy)])
    assert [a.node_id for a in plan([j("a1", org_id="org_a")], mixed).assignments] == ["own-uids"]
    # the index agrees with the brute-force reference, placed or waiting
    a1 = j("a1", org_id="org_a")
    for pairs in ([(shared, busy)], [(shared, busy), (own_uids, busy)]):
        got, want = place(a1, FleetIndex(pairs)), reference_place(a1, pairs)
        assert getattr(got, "node_id", None) == getattr(want, "node_id", None)
        assert getattr(got, "reason", None) == getattr(want, "reason", None)
