"""Placement inputs: parsing, defaults, ordering and validation (table-driven)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runplane.jobs.demand import demand_of
from runplane.jobs.jobspec import JobSpec
from runplane.placement import (
    DEFAULT_CPU_CORES,
    DEFAULT_RAM_GB,
    PRESETS,
    WEIGHT_NAMES,
    DemandError,
    Gpu,
    GpuRequirement,
    JobDemand,
    NodeLoad,
    NodeShape,
    Requires,
    Tier,
    cuda_at_least,
    cuda_version,
    resolve_weights,
    weight_problems,
)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("12.10", (12, 10)),
        ("12.9", (12, 9)),
        ("12", (12,)),
        ("12.0", (12,)),
        ("12.0.0", (12,)),
        ("12.4.1", (12, 4, 1)),
        ("v11.8", (11, 8)),
        (" 12.2 ", (12, 2)),
        ("12.4-rc1", (12, 4)),
        ("", None),
        ("n/a", None),
        (None, None),
    ],
)
def test_cuda_version_parses_numerically(text: str | None, parsed: tuple[int, ...] | None) -> None:
    assert cuda_version(text) == parsed


@pytest.mark.parametrize(
    ("have", "want", "ok"),
    [
        ("12.10", "12.9", True),  # numeric, not lexicographic
        ("12.9", "12.10", False),
        ("12.2", "12.2", True),
        ("12", "12.0", True),
        ("12.0", "12", True),
        ("11.8", "12", False),
        ("13.0", "12.8", True),
        ("12.4.1", "12.4", True),
        ("", "11", False),  # a GPU without CUDA meets no minimum
        ("n/a", "11", False),
        ("", "", True),  # no minimum
        ("12.1", "", True),
    ],
)
def test_cuda_at_least(have: str, want: str, ok: bool) -> None:
    assert cuda_at_least(have, want) is ok


def test_tiers_are_ordered_community_partner_trusted() -> None:
    assert Tier.COMMUNITY < Tier.PARTNER < Tier.TRUSTED
    assert sorted([Tier.TRUSTED, Tier.COMMUNITY, Tier.PARTNER]) == [
        Tier.COMMUNITY,
        Tier.PARTNER,
        Tier.TRUSTED,
    ]


@pytest.mark.parametrize(
    ("raw", "tier"),
    [("community", Tier.COMMUNITY), ("Partner", Tier.PARTNER), (" TRUSTED ", Tier.TRUSTED)],
)
def test_tier_parse(raw: str, tier: Tier) -> None:
    assert Tier.parse(raw) is tier
    assert NodeShape("n", tier=raw).tier is tier  # type: ignore[arg-type]


def test_unknown_tier_is_refused() -> None:
    with pytest.raises(ValueError, match="valid: community, partner, trusted"):
        Tier.parse("gold")


@pytest.mark.parametrize(
    ("kwargs", "cpu", "ram", "gpus", "cpu_min", "ram_min"),
    [
        ({}, DEFAULT_CPU_CORES, DEFAULT_RAM_GB, 0, 1, 2),
        ({"cpu_cores": 4, "ram_gb": 16}, 4, 16, 0, 4, 16),
        # The stack needs an 8-core machine and the job gives no limit: it reserves 8.
        ({"requires": Requires(min_cores=8, min_ram_gb=32)}, 8, 32, 0, 8, 32),
        # An explicit limit is what is reserved; the requirement still applies to the node.
        ({"cpu_cores": 2, "requires": Requires(min_cores=8)}, 2, 2, 0, 8, 2),
        ({"requires": Requires(gpu=GpuRequirement(required=True))}, 1, 2, 1, 1, 2),
        ({"gpu_count": 2}, 1, 2, 2, 1, 2),
        ({"gpu_count": 2, "requires": Requires(gpu=GpuRequirement(required=True))}, 1, 2, 2, 1, 2),
        # GPU details without required/gpu_count ask for no GPU.
        ({"requires": Requires(gpu=GpuRequirement(min_vram_gb=24))}, 1, 2, 0, 1, 2),
        ({"cpu_cores": 0.5}, 0.5, 2, 0, 0.5, 2),
    ],
)
def test_reservation_defaults(
    kwargs: dict[str, object], cpu: float, ram: float, gpus: int, cpu_min: float, ram_min: float
) -> None:
    job = JobDemand("j", **kwargs)  # type: ignore[arg-type]
    assert (job.cpu, job.ram, job.gpus, job.cpu_min, job.ram_min) == (
        cpu,
        ram,
        gpus,
        cpu_min,
        ram_min,
    )


@pytest.mark.parametrize(
    ("given", "normal"),
    [("amd64", "x86_64"), ("x86_64", "x86_64"), ("aarch64", "arm64"), ("ARM64", "arm64")],
)
def test_arch_aliases_are_folded(given: str, normal: str) -> None:
    assert NodeShape("n", arch=given).arch == normal
    assert Requires(arch=(given,)).arch == (normal,)


def test_node_normalises_gpus_and_vendor() -> None:
    node = NodeShape(
        "n",
        gpus=[Gpu("B", "NVIDIA", 80, "12.4"), Gpu("A", "Nvidia", 24, "12.2")],  # type: ignore[arg-type]
        capabilities={"kvm"},  # type: ignore[arg-type]
    )
    assert [g.model for g in node.gpus] == ["A", "B"]
    assert {g.vendor for g in node.gpus} == {"nvidia"}
    assert node.capabilities == frozenset({"kvm"})
    assert node.gpu_specs == (("nvidia", 24, (12, 2)), ("nvidia", 80, (12, 4)))
    hash(node)  # usable as a key


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cpu_cores": -1},
        {"ram_gb": float("nan")},
        {"dlperf": float("inf")},
        {"max_concurrency": -1},
        {"id": ""},
    ],
)
def test_bad_node_values_are_refused(kwargs: dict[str, object]) -> None:
    args = {"id": "n", **kwargs}
    with pytest.raises((ValueError, TypeError)):
        NodeShape(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs", [{"used_cpu": -1}, {"used_gpu": -1}, {"active_jobs": 1.5}, {"used_ram": float("nan")}]
)
def test_bad_load_values_are_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises((ValueError, TypeError)):
        NodeLoad(**kwargs)  # type: ignore[arg-type]


def test_load_plus_adds_and_floors_at_zero() -> None:
    load = NodeLoad(used_cpu=2, used_ram=4, used_gpu=1, active_jobs=1)
    assert load.plus(1, 2, 1) == NodeLoad(3, 6, 2, 2)
    assert load.plus(-5, -5, -5, -5) == NodeLoad(0, 0, 0, 0)


# --- weights ------------------------------------------------------------------------------


def test_weight_names_and_presets_are_exposed() -> None:
    assert WEIGHT_NAMES == ("binpack", "spread", "gpu_fit", "dlperf", "reliability", "image_cached")
    assert set(PRESETS) == {"training", "interactive", "batch"}
    for table in PRESETS.values():
        assert set(table) <= set(WEIGHT_NAMES)


def test_unknown_weight_is_an_error_naming_the_valid_ones() -> None:
    with pytest.raises(DemandError) as caught:
        JobDemand("j", weights={"binpack": 1, "speed": 2})
    [problem] = caught.value.problems
    assert problem.key == "weights.speed"
    assert problem.code == "unknown_weight"
    assert "binpack, spread, gpu_fit, dlperf, reliability, image_cached" in problem.message


@pytest.mark.parametrize(
    ("weights", "preset", "codes"),
    [
        ({}, None, []),
        ({"dlperf": 2.5}, "training", []),
        ({"dlperf": -1}, None, ["out_of_range"]),
        ({"dlperf": float("nan")}, None, ["out_of_range"]),
        ({"dlperf": 1e9}, None, ["out_of_range"]),
        ({"dlperf": "2"}, None, ["bad_type"]),
        ({"dlperf": True}, None, ["bad_type"]),
        ({}, "fast", ["unknown_preset"]),
        ({"x": 1, "y": 1}, "fast", ["unknown_preset", "unknown_weight", "unknown_weight"]),
    ],
)
def test_weight_problems(weights: dict[str, object], preset: str | None, codes: list[str]) -> None:
    assert [p.code for p in weight_problems(weights, preset)] == codes


def test_explicit_weights_override_and_extend_the_preset() -> None:
    table = resolve_weights("batch", {"binpack": 0, "dlperf": 2})
    assert table["binpack"] == 0  # overridden (switched off)
    assert table["dlperf"] == 2  # extended
    assert table["gpu_fit"] == PRESETS["batch"]["gpu_fit"]  # kept
    job = JobDemand("j", weights={"binpack": 0, "dlperf": 2}, weights_preset="batch")
    assert dict(job.active_weights) == {"gpu_fit": 2.0, "dlperf": 2.0, "reliability": 0.5}


# --- from the API's shapes ----------------------------------------------------------------


def _spec(**fields: object) -> JobSpec:
    return JobSpec.model_validate({"stack": "shell", **fields})


def test_job_from_its_spec_maps() -> None:
    spec = _spec(
        limits={"cpu_cores": 4, "ram_gb": 16, "gpu_count": 2, "timeout_sec": 600},
        requires={
            "gpu": {"required": True, "min_vram_gb": 24, "vendor": "NVIDIA", "cuda_min": "12.1"},
            "cpu": {"min_cores": 8},
            "ram": {"min_gb": 32},
            "disk": {"min_gb": 100},
            "arch": ["amd64"],
            "trust": {"min_tier": "partner"},
            "capabilities": ["docker"],
        },
        weights={"dlperf": 2},
        weights_preset="training",
    )
    job = demand_of("job-1", 150, spec)
    assert (job.priority, job.created_at) == (150, "job-1")  # ids sort by creation time
    assert (job.cpu, job.ram, job.gpus) == (4, 16, 2)
    assert (job.cpu_min, job.ram_min, job.disk_min) == (8, 32, 100)
    assert job.requires.gpu.vendor == "nvidia"
    assert job.requires.arch == ("x86_64",)
    assert job.requires.min_tier is Tier.PARTNER
    assert job.requires.capabilities == frozenset({"docker"})
    assert job.weight_table["dlperf"] == 2
    gvisor = demand_of("job-2", 1, _spec(isolation="gvisor"))
    assert gvisor.requires.capabilities == frozenset({"isolation-gvisor"})


def test_the_spec_refuses_malformed_shapes() -> None:
    """What the body's models check is not checked again by placement."""
    with pytest.raises(ValidationError) as caught:
        _spec(
            limits={"cpu_cores": -2, "gpu_count": 1.5},
            requires={"trust": {"min_tier": "gold"}, "arch": "x86_64", "ram": 4},
        )
    locs = {err["loc"][:2] for err in caught.value.errors()}
    assert locs >= {
        ("limits", "cpu_cores"),
        ("limits", "gpu_count"),
        ("requires", "trust"),
        ("requires", "arch"),
        ("requires", "ram"),
    }


def test_demand_of_reports_every_problem_placement_checks() -> None:
    spec = _spec(
        requires={"gpu": {"cuda_min": "latest"}}, weights={"fast": 1}, weights_preset="quick"
    )
    with pytest.raises(DemandError) as caught:
        demand_of("j", 1, spec)
    keys = {(p.key, p.code) for p in caught.value.problems}
    assert keys == {
        ("requires.gpu.cuda_min", "bad_value"),
        ("weights.fast", "unknown_weight"),
        ("weights_preset", "unknown_preset"),
    }


def test_empty_spec_is_the_default_job() -> None:
    assert demand_of("j", 100, _spec()) == JobDemand("j", created_at="j")


def test_node_and_load_from_the_api_node_view() -> None:
    view = {
        "id": "node-1",
        "name": "gpu box",
        "disabled": False,
        "tier": "trusted",
        "cpu_cores": 32,
        "ram_gb": 128,
        "gpus": 2,
        "max_vram_gb": 24,
        "gpu_models": [
            {"model": "RTX 4090", "vendor": "nvidia", "vram_gb": 24, "cuda": "12.4"},
            {"model": "RTX 4090", "vendor": "nvidia", "vram_gb": 24, "cuda": "12.4"},
        ],
        "arch": "amd64",
        "os": "Linux",
        "max_concurrency": 4,
        "used_cpu": 8,
        "used_ram": 32,
        "used_gpu": 1,
        "dlperf": 91.5,
        "reliability": 0.97,
        "active_jobs": 2,
    }
    node = NodeShape.from_view(view)
    assert node.tier is Tier.TRUSTED
    assert node.arch == "x86_64"
    assert node.gpu_count == 2
    assert (node.max_concurrency, node.dlperf, node.reliability) == (4, 91.5, 0.97)
    assert NodeLoad.from_view(view) == NodeLoad(8, 32, 1, 2)


def test_for_job_is_the_same_demand_for_another_job() -> None:
    """A job array's items share one derived demand: the copy equals a fresh one."""
    spec = _spec(limits={"cpu_cores": 2, "gpu_count": 1}, requires={"arch": ["x86_64"]})
    first = demand_of("job_a", 7, spec, "org_x")
    twin = first.for_job("job_b", "job_b")
    fresh = demand_of("job_b", 7, spec, "org_x")
    assert twin == fresh and twin is not first
    assert twin.fit_signature == fresh.fit_signature and twin.sort_key == fresh.sort_key
    assert first.job_id == "job_a"  # the original is unchanged
