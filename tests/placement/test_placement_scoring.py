"""Scorers, presets and explicit weights pick the expected node among a few."""

from __future__ import annotations

from typing import Any

import pytest

from runplane.placement import (
    SCORERS,
    FleetIndex,
    Gpu,
    GpuRequirement,
    JobDemand,
    NodeLoad,
    NodeShape,
    Placement,
    Requires,
    place,
    reference_place,
    score,
    score_breakdown,
)
from runplane.placement.scoring import DLPERF_HALF

H100 = Gpu("H100", "nvidia", 80, "12.8")
RTX = Gpu("RTX 4090", "nvidia", 24, "12.4")
SMALL = Gpu("RTX 3060", "nvidia", 12, "12.2")


def n(node_id: str, **kw: Any) -> NodeShape:
    base: dict[str, Any] = {"cpu_cores": 16, "ram_gb": 64, "max_concurrency": 4}
    base.update(kw)
    return NodeShape(node_id, **base)


Fleetish = list[tuple[NodeShape, NodeLoad]]

GPU_FLEET: Fleetish = [
    (n("fast", gpus=(H100,), dlperf=900, reliability=0.99), NodeLoad(used_cpu=8, active_jobs=2)),
    (n("flaky", gpus=(H100,), dlperf=900, reliability=0.40), NodeLoad()),
    (n("slow", gpus=(SMALL,), dlperf=15, reliability=0.99), NodeLoad(used_cpu=12, active_jobs=3)),
]
CPU_FLEET: Fleetish = [
    (n("busy", reliability=0.95), NodeLoad(used_cpu=12, used_ram=48, active_jobs=3)),
    (n("idle", reliability=0.95), NodeLoad()),
    (n("gpu-box", gpus=(RTX,), reliability=0.95), NodeLoad(used_cpu=8, used_ram=32, active_jobs=2)),
]

# (fleet, job, expected node, why)
CASES: list[tuple[Fleetish, JobDemand, str, str]] = [
    (
        GPU_FLEET,
        JobDemand("t", gpu_count=1, weights_preset="training"),
        "fast",
        "dlperf + reliability",
    ),
    (CPU_FLEET, JobDemand("i", weights_preset="interactive"), "idle", "least loaded"),
    (CPU_FLEET, JobDemand("b", weights_preset="batch"), "busy", "packs; keeps the GPU box free"),
    (CPU_FLEET, JobDemand("d"), "busy", "default: binpack + gpu_fit"),
    # Explicit weights override the preset: batch, but spread instead of binpack.
    (
        CPU_FLEET,
        JobDemand("o", weights_preset="batch", weights={"binpack": 0, "spread": 5}),
        "idle",
        "override",
    ),
    # ...and extend it: interactive plus a strong gpu_fit keeps off the GPU box.
    (
        CPU_FLEET,
        JobDemand("e", weights_preset="interactive", weights={"gpu_fit": 10}),
        "idle",
        "extend",
    ),
    # Reliability alone prefers the dependable node even if it is slow.
    (
        GPU_FLEET,
        JobDemand("r", gpu_count=1, weights={"reliability": 1, "gpu_fit": 0, "binpack": 0}),
        "fast",
        "reliability ties broken by id",
    ),
    # A small GPU job fits the small GPU best when gpu_fit dominates.
    (
        GPU_FLEET,
        JobDemand(
            "g",
            gpu_count=1,
            requires=Requires(gpu=GpuRequirement(min_vram_gb=12)),
            weights={"gpu_fit": 10, "binpack": 0, "reliability": 0},
        ),
        "slow",
        "smallest GPU that fits",
    ),
]


@pytest.mark.parametrize(("fleet", "job", "expected", "why"), CASES)
def test_expected_node_is_picked(fleet: Fleetish, job: JobDemand, expected: str, why: str) -> None:
    result = place(job, FleetIndex(fleet))
    assert isinstance(result, Placement), why
    assert result.node_id == expected, why
    assert result == reference_place(job, fleet)


def test_interactive_and_batch_disagree_on_the_same_fleet() -> None:
    fleet = FleetIndex(CPU_FLEET)
    interactive = place(JobDemand("i", weights_preset="interactive"), fleet)
    batch = place(JobDemand("b", weights_preset="batch"), fleet)
    assert isinstance(interactive, Placement) and isinstance(batch, Placement)
    assert interactive.node_id != batch.node_id


def test_breakdown_lists_the_weighted_scorers() -> None:
    job = JobDemand("t", gpu_count=1, weights_preset="training")
    total, parts = score_breakdown(*GPU_FLEET[0], job)
    assert [name for name, _ in parts] == ["binpack", "gpu_fit", "dlperf", "reliability"]
    weights = dict(job.active_weights)
    assert total == pytest.approx(sum(weights[k] * v for k, v in parts) / sum(weights.values()))


@pytest.mark.parametrize(
    ("scorer", "node", "load", "job", "value"),
    [
        (
            "binpack",
            n("a", cpu_cores=4, ram_gb=8, max_concurrency=2),
            NodeLoad(),
            JobDemand("j", cpu_cores=4, ram_gb=8),
            (1 + 1 + 0.5) / 3,
        ),
        (
            "spread",
            n("a", cpu_cores=4, ram_gb=8, max_concurrency=2),
            NodeLoad(),
            JobDemand("j", cpu_cores=4, ram_gb=8),
            1 - (1 + 1 + 0.5) / 3,
        ),
        (
            "binpack",
            n("a", gpus=(RTX, RTX)),
            NodeLoad(used_gpu=1),
            JobDemand("j", gpu_count=1),
            (1 / 16 + 2 / 64 + 1 + 1 / 4) / 4,
        ),
        ("gpu_fit", n("a"), NodeLoad(), JobDemand("j"), 1.0),
        ("gpu_fit", n("a", gpus=(RTX,)), NodeLoad(), JobDemand("j"), 0.0),
        (
            "gpu_fit",
            n("a", gpus=(RTX,)),
            NodeLoad(),
            JobDemand("j", gpu_count=1, requires=Requires(gpu=GpuRequirement(min_vram_gb=24))),
            1.0,
        ),
        (
            "gpu_fit",
            n("a", gpus=(H100, H100)),
            NodeLoad(),
            JobDemand("j", gpu_count=1, requires=Requires(gpu=GpuRequirement(min_vram_gb=20))),
            (20 / 80 + 1 / 2) / 2,
        ),
        (
            "gpu_fit",
            n("a", gpus=(RTX,)),
            NodeLoad(),
            JobDemand("j", gpu_count=1),
            (16 / 24 + 1) / 2,
        ),
        ("dlperf", n("a", dlperf=DLPERF_HALF), NodeLoad(), JobDemand("j"), 0.5),
        ("dlperf", n("a", dlperf=0), NodeLoad(), JobDemand("j"), 0.0),
        ("reliability", n("a", reliability=0.8), NodeLoad(), JobDemand("j"), 0.8),
        ("reliability", n("a", reliability=7), NodeLoad(), JobDemand("j"), 1.0),
    ],
)
def test_scorer_values(
    scorer: str, node: NodeShape, load: NodeLoad, job: JobDemand, value: float
) -> None:
    assert SCORERS[scorer](node, load, job) == pytest.approx(value)


def test_scores_stay_in_unit_range_even_when_overcommitted() -> None:
    node = n("a", gpus=(RTX,), dlperf=1e6, reliability=2)
    load = NodeLoad(used_cpu=100, used_ram=500, used_gpu=3, active_jobs=9)
    for preset in (None, "training", "interactive", "batch"):
        job = JobDemand("j", gpu_count=1, weights_preset=preset)
        assert 0.0 <= score(node, load, job) <= 1.0
        for name, value in score_breakdown(node, load, job)[1]:
            assert 0.0 <= value <= 1.0, name


def test_all_zero_weights_still_place_by_fit() -> None:
    job = JobDemand("z", weights={"binpack": 0, "gpu_fit": 0, "reliability": 0})
    assert job.active_weights == ()
    result = place(job, FleetIndex(CPU_FLEET))
    assert isinstance(result, Placement)
    assert result.score == 0.0
    assert result.node_id == "busy"  # least free CPU that fits, then id
