"""Each feasibility filter passes and rejects with the right reason (table-driven), and
what its declaration says (fast form, order, wait-reason phrases) holds."""

from __future__ import annotations

from typing import Any

import pytest

from runplane.placement import (
    ARCH,
    CAPABILITY,
    CPU,
    CPU_FREE,
    CUDA_VERSION,
    DISABLED,
    DISK,
    FILTERS,
    GPU_COUNT,
    GPU_FREE,
    GPU_VENDOR,
    GPU_VRAM,
    IMAGE_ARCH,
    LIMITS,
    MOMENTARY_FILTERS,
    MOMENTARY_REASONS,
    NO_GPU,
    NO_SLOTS,
    OTHER_ORG,
    OWNER,
    RAM,
    RAM_FREE,
    REASONS,
    SLOTS_FULL,
    STATIC_FILTERS,
    STATIC_REASONS,
    TRUST_TIER,
    Gpu,
    GpuRequirement,
    ImageDemand,
    JobDemand,
    NodeLoad,
    NodeShape,
    Requires,
    Tier,
    explain,
    first_rejection,
)
from runplane.placement.filters import (
    CLASS_FILTERS,
    REASON_OF,
    Filter,
    Reason,
    check_cpu_free,
    fits_all,
)
from runplane.placement.shelves import entry

RTX = Gpu("RTX 4090", "nvidia", 24, "12.4")
SMALL = Gpu("RTX 3060", "nvidia", 12, "12.2")
OLD = Gpu("V100", "nvidia", 32, "11.8")
AMD = Gpu("MI250", "amd", 64, "")

FILTER = {f.name: f for f in FILTERS}


def node(**kw: Any) -> NodeShape:
    base: dict[str, Any] = {
        "id": "n1",
        "tier": Tier.PARTNER,
        "cpu_cores": 16,
        "ram_gb": 64,
        "disk_gb": 500,
        "gpus": (RTX, RTX),
        "arch": "x86_64",
        "capabilities": frozenset({"docker"}),
        "max_concurrency": 4,
    }
    base.update(kw)
    return NodeShape(**base)


def gpu_job(count: int = 1, **req: Any) -> JobDemand:
    return JobDemand("j", gpu_count=count, requires=Requires(gpu=GpuRequirement(**req)))


IDLE = NodeLoad()
DIGEST = "sha256:" + "ab" * 32
ARM_IMAGE = ImageDemand("docker.io/library/x@" + DIGEST, ("linux/arm64/v8",))
MULTI_IMAGE = ImageDemand("docker.io/library/y@" + DIGEST, ("linux/amd64", "linux/arm64/v8"))
ANY_IMAGE = ImageDemand("docker.io/library/z@" + DIGEST)  # platforms unknown


def image_job(*images: ImageDemand, **kw: Any) -> JobDemand:
    return JobDemand("j", images=images, **kw)


# (filter, node overrides, load, job, expected reason or None)
ORG_A = JobDemand("j", org_id="org_a")

CASES: list[tuple[str, dict[str, Any], NodeLoad, JobDemand, str | None]] = [
    ("disabled", {}, IDLE, JobDemand("j"), None),
    ("disabled", {"disabled": True}, IDLE, JobDemand("j"), DISABLED),
    ("owner", {}, IDLE, JobDemand("j", org_id="org_b"), None),  # a universal node
    ("owner", {"owner": "org_a"}, IDLE, JobDemand("j", org_id="org_a"), None),
    (
        "owner",
        {"owner": "org_a", "grantees": {"org_b"}},
        IDLE,
        JobDemand("j", org_id="org_b"),
        None,
    ),
    ("owner", {"owner": "org_a"}, IDLE, JobDemand("j"), None),  # a shape check, no org
    ("owner", {"owner": "org_a"}, IDLE, JobDemand("j", org_id="org_b"), OWNER),
    ("trust", {}, IDLE, JobDemand("j", requires=Requires(min_tier=Tier.PARTNER)), None),
    ("trust", {}, IDLE, JobDemand("j", requires=Requires(min_tier=Tier.COMMUNITY)), None),
    ("trust", {}, IDLE, JobDemand("j", requires=Requires(min_tier=Tier.TRUSTED)), TRUST_TIER),
    (
        "trust",
        {"tier": Tier.COMMUNITY},
        IDLE,
        JobDemand("j", requires=Requires(min_tier=Tier.PARTNER)),
        TRUST_TIER,
    ),
    ("arch", {}, IDLE, JobDemand("j"), None),
    ("arch", {}, IDLE, JobDemand("j", requires=Requires(arch=("arm64", "amd64"))), None),
    ("arch", {}, IDLE, JobDemand("j", requires=Requires(arch=("arm64",))), ARCH),
    ("arch", {"arch": "aarch64"}, IDLE, JobDemand("j", requires=Requires(arch=("arm64",))), None),
    (
        "capabilities",
        {},
        IDLE,
        JobDemand("j", requires=Requires(capabilities=frozenset({"docker"}))),
        None,
    ),
    ("image_arch", {}, IDLE, JobDemand("j"), None),  # a host job
    ("image_arch", {}, IDLE, image_job(ANY_IMAGE), None),
    ("image_arch", {}, IDLE, image_job(MULTI_IMAGE), None),
    ("image_arch", {"arch": "aarch64"}, IDLE, image_job(MULTI_IMAGE, ARM_IMAGE), None),
    ("image_arch", {}, IDLE, image_job(ARM_IMAGE), IMAGE_ARCH),
    # a pod: every service's image must exist for the node's arch
    ("image_arch", {}, IDLE, image_job(MULTI_IMAGE, ARM_IMAGE, ANY_IMAGE), IMAGE_ARCH),
    (
        "capabilities",
        {},
        IDLE,
        JobDemand("j", requires=Requires(capabilities=frozenset({"docker", "kvm"}))),
        CAPABILITY,
    ),
    ("limits", {}, IDLE, JobDemand("j", cpu_cores=2), None),  # a reservation, not a limit
    (
        "limits",
        {"capabilities": frozenset({"limit-ram", "limit-pids"})},
        IDLE,
        JobDemand("j", requires=Requires(limits=frozenset({"ram_gb", "pids"}))),
        None,
    ),
    (
        "limits",
        {"capabilities": frozenset({"limit-ram"})},
        IDLE,
        JobDemand("j", requires=Requires(limits=frozenset({"ram_gb", "pids"}))),
        LIMITS,
    ),
    (
        "limits",
        {"capabilities": frozenset({"limits-best-effort"})},
        IDLE,
        JobDemand("j", requires=Requires(limits=frozenset({"egress_allow", "no_internet"}))),
        None,
    ),
    ("gpu", {"gpus": ()}, IDLE, JobDemand("j"), None),
    ("gpu", {}, IDLE, gpu_job(2), None),
    ("gpu", {"gpus": ()}, IDLE, gpu_job(1), NO_GPU),
    ("gpu", {"gpus": ()}, IDLE, gpu_job(0, required=True), NO_GPU),
    ("gpu", {}, IDLE, gpu_job(4), GPU_COUNT),
    ("gpu", {}, IDLE, gpu_job(1, vendor="NVIDIA"), None),
    ("gpu", {}, IDLE, gpu_job(1, vendor="amd"), GPU_VENDOR),
    ("gpu", {"gpus": (AMD, RTX)}, IDLE, gpu_job(2, vendor="amd"), GPU_VENDOR),
    ("gpu", {}, IDLE, gpu_job(1, cuda_min="12.4"), None),
    ("gpu", {}, IDLE, gpu_job(1, cuda_min="12.10"), CUDA_VERSION),
    ("gpu", {"gpus": (AMD,)}, IDLE, gpu_job(1, cuda_min="11"), CUDA_VERSION),
    ("gpu", {"gpus": (OLD, RTX)}, IDLE, gpu_job(2, cuda_min="12"), CUDA_VERSION),
    ("gpu", {}, IDLE, gpu_job(2, min_vram_gb=24), None),
    ("gpu", {}, IDLE, gpu_job(1, min_vram_gb=40), GPU_VRAM),
    ("gpu", {"gpus": (SMALL, RTX)}, IDLE, gpu_job(2, min_vram_gb=16), GPU_VRAM),
    ("gpu", {"gpus": (SMALL, RTX)}, IDLE, gpu_job(1, min_vram_gb=16), None),
    ("cpu", {}, IDLE, JobDemand("j", cpu_cores=16), None),
    ("cpu", {}, IDLE, JobDemand("j", cpu_cores=17), CPU),
    ("cpu", {}, IDLE, JobDemand("j", requires=Requires(min_cores=32)), CPU),
    ("ram", {}, IDLE, JobDemand("j", ram_gb=64), None),
    ("ram", {}, IDLE, JobDemand("j", requires=Requires(min_ram_gb=128)), RAM),
    ("ram", {"ram_gb": 1}, IDLE, JobDemand("j"), RAM),  # the 2 GB default share
    ("disk", {}, IDLE, JobDemand("j", requires=Requires(min_disk_gb=500)), None),
    ("disk", {}, IDLE, JobDemand("j", requires=Requires(min_disk_gb=501)), DISK),
    ("slots", {}, IDLE, JobDemand("j"), None),
    ("slots", {"max_concurrency": 0}, IDLE, JobDemand("j"), NO_SLOTS),
    ("slots_free", {}, NodeLoad(active_jobs=3), JobDemand("j"), None),
    ("slots_free", {}, NodeLoad(active_jobs=4), JobDemand("j"), SLOTS_FULL),
    ("gpu_free", {}, NodeLoad(used_gpu=1), gpu_job(1), None),
    ("gpu_free", {}, NodeLoad(used_gpu=1), gpu_job(2), GPU_FREE),
    ("gpu_free", {}, NodeLoad(used_gpu=2), JobDemand("j"), None),
    # Mixed GPUs: one busy GPU may be the big one, so the big one is not promised.
    (
        "gpu_free",
        {"gpus": (SMALL, RTX)},
        NodeLoad(used_gpu=1),
        gpu_job(1, min_vram_gb=16),
        GPU_FREE,
    ),
    ("gpu_free", {"gpus": (SMALL, RTX)}, NodeLoad(used_gpu=1), gpu_job(1), None),
    ("cpu_free", {}, NodeLoad(used_cpu=12), JobDemand("j", cpu_cores=4), None),
    ("cpu_free", {}, NodeLoad(used_cpu=12.5), JobDemand("j", cpu_cores=4), CPU_FREE),
    ("cpu_free", {}, NodeLoad(used_cpu=16), JobDemand("j"), CPU_FREE),  # 1-core default
    ("ram_free", {}, NodeLoad(used_ram=48), JobDemand("j", ram_gb=16), None),
    ("ram_free", {}, NodeLoad(used_ram=49), JobDemand("j", ram_gb=16), RAM_FREE),
    # Jobs sharing one uid: one org at a time, unless each job has its own uid or the
    # operator allows it (shared-uid-ok).
    ("other_org", {}, NodeLoad(active_jobs=1, orgs=(("org_b", 1),)), ORG_A, OTHER_ORG),
    ("other_org", {}, NodeLoad(active_jobs=2, orgs=(("org_a", 2),)), ORG_A, None),
    ("other_org", {}, NodeLoad(active_jobs=1, orgs=(("org_b", 1),)), JobDemand("j"), None),
    ("other_org", {"capabilities": {"uid-per-job"}}, NodeLoad(orgs=(("org_b", 1),)), ORG_A, None),
    ("other_org", {"capabilities": {"shared-uid-ok"}}, NodeLoad(orgs=(("org_b", 1),)), ORG_A, None),
]


@pytest.mark.parametrize(("name", "overrides", "load", "job", "reason"), CASES)
def test_filter(
    name: str, overrides: dict[str, Any], load: NodeLoad, job: JobDemand, reason: str | None
) -> None:
    rejection = FILTER[name](node(**overrides), load, job)
    if reason is None:
        assert rejection is None
    else:
        assert rejection is not None
        assert rejection.reason == reason
        assert rejection.detail
        assert rejection.static is (reason in STATIC_REASONS)


def test_every_filter_has_pass_and_reject_cases() -> None:
    passing = {name for name, _, _, _, reason in CASES if reason is None}
    rejecting = {name for name, _, _, _, reason in CASES if reason is not None}
    assert passing == rejecting == set(FILTER)
    assert {reason for *_, reason in CASES} - {None} == set(REASONS)


def test_static_and_momentary_are_split() -> None:
    assert {SLOTS_FULL, GPU_FREE, CPU_FREE, RAM_FREE, OTHER_ORG} == MOMENTARY_REASONS
    assert STATIC_REASONS.isdisjoint(MOMENTARY_REASONS)
    assert all(f.static for f in STATIC_FILTERS)
    assert not any(f.static for f in MOMENTARY_FILTERS)
    # Static filters run first, so a node's reason is static whenever any static one fails.
    assert FILTERS == STATIC_FILTERS + MOMENTARY_FILTERS


@pytest.mark.parametrize(
    ("overrides", "load", "job", "reason"),
    [
        # Several failures: the first in filter order is the reason.
        (
            {"disabled": True, "arch": "arm64"},
            IDLE,
            JobDemand("j", requires=Requires(arch=("x86_64",))),
            DISABLED,
        ),
        (
            {"arch": "arm64", "gpus": ()},
            IDLE,
            JobDemand("j", gpu_count=1, requires=Requires(arch=("x86_64",))),
            ARCH,
        ),
        ({"gpus": ()}, NodeLoad(active_jobs=4), gpu_job(1), NO_GPU),
        ({"cpu_cores": 2}, NodeLoad(active_jobs=4), JobDemand("j", cpu_cores=4), CPU),
        ({}, NodeLoad(active_jobs=4, used_cpu=16), JobDemand("j"), SLOTS_FULL),
        ({}, NodeLoad(used_cpu=16, used_ram=64), JobDemand("j"), CPU_FREE),
        ({}, IDLE, JobDemand("j", cpu_cores=8, ram_gb=32, gpu_count=2), None),
    ],
)
def test_first_rejection_follows_filter_order(
    overrides: dict[str, Any], load: NodeLoad, job: JobDemand, reason: str | None
) -> None:
    rejection = first_rejection(node(**overrides), load, job)
    assert (rejection.reason if rejection else None) == reason


@pytest.mark.parametrize(("name", "overrides", "load", "job", "reason"), CASES)
def test_a_fit_filters_fast_form_agrees_with_its_check(
    name: str, overrides: dict[str, Any], load: NodeLoad, job: JobDemand, reason: str | None
) -> None:
    """What the index runs on each visited node (each ``Filter.fits``, and ``fits_all``,
    them written out) says what the checks say."""
    f = FILTER[name]
    shape = node(**overrides)
    e = entry(shape, load)
    if f.fits is not None:
        assert f.fits(e, job) is (reason is None)
    fit_filters = [g for g in FILTERS if not g.eligibility]
    assert fits_all(e, job) is all(g(shape, load, job) is None for g in fit_filters)


def test_the_order_is_the_layout_the_index_relies_on() -> None:
    """``disabled`` first (the index keeps disabled nodes out of classes and counts them
    all), then the class filters with ``owner`` first (the index applies it per org on
    verdicts of the others), the other node filters, the load filters; among these, the
    two the index applies by where it keeps a node first (the busy breakdown)."""
    assert FILTERS[0].name == "disabled"
    assert CLASS_FILTERS[0].name == "owner"
    rank = {"class": 0, "node": 1, "load": 2}
    ranks = [rank[f.level] for f in FILTERS[1:]]
    assert ranks == sorted(ranks)
    assert [f.name for f in MOMENTARY_FILTERS][:2] == ["slots_free", "gpu_free"]
    assert all(not f.eligibility for f in MOMENTARY_FILTERS[2:])


def test_eligibility_filters_are_classes_or_where_the_index_keeps_a_node() -> None:
    """The index applies a class filter by class verdicts, and four node and load
    filters by where it keeps a node (out of the classes; off the walkable shelves; on
    a shelf of its free GPU count). Any other filter must be a fit filter, which the
    index checks on each node it visits: a new filter of node or load level that is not
    is not applied by the index at all."""
    kept = {"disabled", "slots", "slots_free", "gpu_free"}
    assert {f.name for f in FILTERS if f.eligibility and f.level != "class"} == kept


@pytest.mark.parametrize("code", sorted(REASON_OF))
def test_every_reason_reads_in_a_wait_reason(code: str) -> None:
    job = JobDemand(
        "j",
        gpu_count=2,
        org_id="org_a",
        requires=Requires(
            gpu=GpuRequirement(min_vram_gb=24),
            arch=("arm64",),
            capabilities=frozenset({"kvm"}),
            limits=frozenset({"pids"}),
        ),
    )
    reason = REASON_OF[code]
    if code in STATIC_REASONS:
        assert reason.need is not None
        text = explain({code: 3}, job)
        assert text == f"no node meets: {reason.need(job)} (3 nodes {reason.nodes[1]})"
    else:
        assert reason.busy is not None
        text = explain({code: 1}, job)
        assert text == (
            f"waiting for free capacity: 1 node matches but is busy (1 node {reason.busy(job)[0]})"
        )


def test_a_declaration_says_what_placement_needs() -> None:
    free = Reason(CPU_FREE, busy=lambda job: ("has none free", "have none free"))
    static = Reason(CPU, ("has few", "have few"), lambda job: "cores")
    with pytest.raises(ValueError, match="momentary reason CPU_FREE needs busy"):
        Filter("x", "load", check_cpu_free, (Reason(CPU_FREE, ("a", "b"), lambda job: "c"),))
    with pytest.raises(ValueError, match="static reason CPU_FREE needs nodes, need"):
        Filter("x", "node", check_cpu_free, (free,))
    with pytest.raises(ValueError, match="only a node or load filter of one reason fits"):
        Filter("x", "class", check_cpu_free, (static,), fits=lambda e, j: True)
    declared = Filter("x", "load", check_cpu_free, (free,), fits=lambda e, j: e.free_cpu >= j.cpu)
    assert not declared.eligibility
    assert Filter("x", "load", check_cpu_free, (free,)).eligibility
