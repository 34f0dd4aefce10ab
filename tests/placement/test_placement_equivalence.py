"""The index must agree exactly with a brute-force scan over every node (hypothesis)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runplane.placement import (
    FleetIndex,
    Gpu,
    GpuRequirement,
    ImageDemand,
    JobDemand,
    NodeLoad,
    NodeShape,
    Requires,
    Tier,
    first_rejection,
    place,
    plan,
    reference_candidates,
    reference_place,
    reference_plan,
    reference_stream_takes,
)
from runplane.placement.fairshare import Standing
from runplane.placement.index import STREAM_BUDGET
from runplane.placement.queue import JobQueue, plan_groups

A = Gpu("A", "nvidia", 24, "12.2")
B = Gpu("B", "nvidia", 80, "12.10")
C = Gpu("C", "amd", 16, "")
D = Gpu("D", "nvidia", 12, "11.8")
GPU_SETS = [(), (), (A,), (A, A), (B,), (B, B, B, B), (C,), (C, C), (A, D), (B, A, D)]
CAPS = [
    frozenset(),
    frozenset({"docker"}),
    frozenset({"docker", "kvm"}),
    frozenset({"kvm"}),
    frozenset({"uid-per-job"}),
]
NODE_IDS = [f"n{i:02d}" for i in range(40)]
#: image digests a node's cache may hold, and images a job may run in (with platforms)
DIGESTS = ["sha256:" + c * 64 for c in "abc"]
CACHES = [
    frozenset(),
    frozenset(),
    frozenset(DIGESTS[:1]),
    frozenset(DIGESTS[1:]),
    frozenset(DIGESTS),
]
IMAGES = [
    (),
    (),
    (ImageDemand("x@" + DIGESTS[0]),),
    (ImageDemand("x@" + DIGESTS[0], ("linux/amd64", "linux/arm64/v8")),),
    (ImageDemand("y@" + DIGESTS[1], ("linux/arm64",)),),
    (ImageDemand("x@" + DIGESTS[0]), ImageDemand("z@" + DIGESTS[2], ("linux/amd64",))),
]


def often(common: object, *rare: object) -> st.SearchStrategy[object]:
    """Mostly ``common``, sometimes one of ``rare`` (keeps most jobs placeable)."""
    return st.sampled_from([common] * 8 + list(rare))


@st.composite
def nodes(draw: st.DrawFn) -> tuple[NodeShape, NodeLoad]:
    gpus = draw(st.sampled_from(GPU_SETS))
    # Weighted by repetition: mostly roomy nodes, a tail of small and degenerate ones.
    cores = draw(st.sampled_from([16] * 3 + [8] * 3 + [32, 4, 2, 1, 0]))
    ram = draw(st.sampled_from([64] * 3 + [16] * 3 + [4, 2, 1, 0]))
    slots = draw(st.sampled_from([8] * 3 + [2] * 2 + [3, 1, 0]))
    shape = NodeShape(
        id=draw(st.sampled_from(NODE_IDS)),
        tier=draw(st.sampled_from(list(Tier))),
        disabled=draw(often(False, True)),
        cpu_cores=cores,
        ram_gb=ram,
        disk_gb=draw(often(200, 50, 0)),  # type: ignore[arg-type]
        gpus=gpus,
        arch=draw(often("x86_64", "arm64", "aarch64")),
        capabilities=draw(st.sampled_from(CAPS)),
        max_concurrency=slots,
        dlperf=draw(st.sampled_from([0.0, 10.0, 50.0, 120.0])),
        reliability=draw(st.sampled_from([0.0, 0.5, 0.9, 1.0])),
        # owned by an org (or universal), maybe granted to another (the owner filter)
        owner=draw(st.sampled_from([None, None, "org_a", "org_b"])),
        grantees=draw(st.sampled_from([frozenset(), frozenset(), frozenset({"org_c"})])),
        images=draw(st.sampled_from(CACHES)),
    )
    load = NodeLoad(
        used_cpu=draw(st.sampled_from([0] * 3 + [1, 0.5, 2, 4, 8, 17])),
        used_ram=draw(st.sampled_from([0] * 3 + [1, 2, 8, 30, 70])),
        used_gpu=draw(st.integers(0, len(gpus) + 1)),
        active_jobs=draw(st.integers(0, slots + 1)),
        # the orgs whose jobs hold it (one org at a time on a node whose jobs share a uid)
        orgs=draw(often((), (("org_a", 1),), (("org_b", 1),), (("org_a", 1), ("org_b", 1)))),  # type: ignore[arg-type]
    )
    return shape, load


@st.composite
def jobs(draw: st.DrawFn, job_id: str = "j", gangs: bool = False) -> JobDemand:
    """A job; with ``gangs``, often a gang of 2 or 3 ranks."""
    return JobDemand(
        nodes=draw(often(1, 2, 3)) if gangs else 1,  # type: ignore[arg-type]
        job_id=job_id,
        priority=draw(st.sampled_from([50, 100, 200])),
        created_at=draw(st.integers(0, 5)),
        cpu_cores=draw(st.sampled_from([0] * 3 + [0.5, 1, 2, 4, 8])),
        ram_gb=draw(st.sampled_from([0] * 3 + [1, 4, 16])),
        gpu_count=draw(often(0, 1, 2, 4)),  # type: ignore[arg-type]
        org_id=draw(st.sampled_from([None, "org_a", "org_b", "org_c"])),
        images=draw(st.sampled_from(IMAGES)),
        requires=Requires(
            gpu=GpuRequirement(
                required=draw(often(False, True)),  # type: ignore[arg-type]
                min_vram_gb=draw(often(0, 16, 24, 80)),  # type: ignore[arg-type]
                vendor=draw(often("", "nvidia", "AMD")),  # type: ignore[arg-type]
                cuda_min=draw(often("", "12.2", "12.9", "11")),  # type: ignore[arg-type]
            ),
            min_cores=draw(often(0, 2, 8)),  # type: ignore[arg-type]
            min_ram_gb=draw(often(0, 4, 32)),  # type: ignore[arg-type]
            min_disk_gb=draw(often(0, 100)),  # type: ignore[arg-type]
            arch=draw(often((), ("arm64",), ("x86_64", "amd64"))),  # type: ignore[arg-type]
            min_tier=draw(often(Tier.COMMUNITY, Tier.PARTNER, Tier.TRUSTED)),  # type: ignore[arg-type]
            capabilities=draw(often(frozenset(), frozenset({"kvm"}))),  # type: ignore[arg-type]
        ),
        weights=draw(
            st.dictionaries(
                st.sampled_from(
                    ["binpack", "spread", "gpu_fit", "dlperf", "reliability", "image_cached"]
                ),
                st.sampled_from([0.0, 0.5, 1.0, 3.0]),
                max_size=3,
            )
        ),
        weights_preset=draw(st.sampled_from([None, "training", "interactive", "batch"])),
    )


@st.composite
def gpu_nodes(draw: st.DrawFn) -> tuple[NodeShape, NodeLoad]:
    """GPU nodes with roomy CPU and RAM, often partly busy on GPUs."""
    gpus = draw(st.sampled_from([g for g in GPU_SETS if g]))
    shape = NodeShape(
        id="g",
        tier=draw(often(Tier.TRUSTED, Tier.COMMUNITY)),  # type: ignore[arg-type]
        cpu_cores=32,
        ram_gb=128,
        disk_gb=500,
        gpus=gpus,
        capabilities=draw(often(frozenset(), frozenset({"kvm"}))),  # type: ignore[arg-type]
        max_concurrency=draw(st.sampled_from([8, 8, 1])),
        dlperf=draw(st.sampled_from([0.0, 10.0, 50.0, 120.0])),
        reliability=draw(st.sampled_from([0.5, 0.9, 1.0])),
    )
    load = NodeLoad(
        used_cpu=draw(st.sampled_from([0, 4, 31])),
        used_ram=draw(st.sampled_from([0, 16, 127])),
        used_gpu=draw(st.integers(0, len(gpus))),
        active_jobs=draw(st.integers(0, 2)),
    )
    return shape, load


@st.composite
def gpu_jobs(draw: st.DrawFn) -> JobDemand:
    return JobDemand(
        job_id="g",
        cpu_cores=draw(st.sampled_from([0, 2])),
        gpu_count=draw(st.sampled_from([1, 1, 2, 4])),
        requires=Requires(
            gpu=GpuRequirement(
                min_vram_gb=draw(st.sampled_from([0, 0, 16, 24])),
                vendor=draw(st.sampled_from(["", "", "nvidia"])),
                cuda_min=draw(st.sampled_from(["", "", "12.2"])),
            ),
            capabilities=draw(often(frozenset(), frozenset({"kvm"}))),  # type: ignore[arg-type]
        ),
        weights=draw(
            st.dictionaries(
                st.sampled_from(
                    ["binpack", "spread", "gpu_fit", "dlperf", "reliability", "image_cached"]
                ),
                st.sampled_from([0.0, 1.0, 3.0]),
                max_size=2,
            )
        ),
        weights_preset=draw(st.sampled_from([None, "training", "interactive", "batch"])),
    )


def unique(pairs: list[tuple[NodeShape, NodeLoad]]) -> dict[str, tuple[NodeShape, NodeLoad]]:
    """The drawn nodes under distinct ids (ids in reverse draw order, so id order and
    draw order differ)."""
    n = len(pairs)
    renamed = [(replace(shape, id=f"m{n - i:03d}"), load) for i, (shape, load) in enumerate(pairs)]
    return {shape.id: (shape, load) for shape, load in renamed}


def assert_same_candidates(
    indexed: FleetIndex,
    job: JobDemand,
    by_id: dict[str, tuple[NodeShape, NodeLoad]],
    per_stream: int,
    budget: int,
) -> None:
    """The index's candidate set is the brute-force one, and every candidate is feasible;
    so is what each stream takes, in order."""
    takes = reference_stream_takes(job, by_id.values(), per_stream=per_stream, stream_budget=budget)
    got_takes = {stream: ids for stream, ids in indexed.stream_takes(job).items() if ids}
    assert got_takes == {
        stream: [node.id for node, _ in take] for stream, take in takes.items() if take
    }
    got = indexed.candidates(job)
    want = reference_candidates(job, by_id.values(), per_stream=per_stream, stream_budget=budget)
    assert sorted(n.id for n, _ in got) == sorted(n.id for n, _ in want)
    for node, load in got:
        assert first_rejection(node, load, job) is None


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEWER = settings(SETTINGS, max_examples=150)


@SETTINGS
@given(
    fleet=st.lists(nodes(), min_size=3, max_size=60),
    job=jobs(),
    per_stream=st.integers(1, 4),
    walk=st.sampled_from(["auto", "scan", "merge", "enumerate"]),
)
def test_place_matches_brute_force(
    fleet: list[tuple[NodeShape, NodeLoad]], job: JobDemand, per_stream: int, walk: str
) -> None:
    by_id = unique(fleet)
    indexed = FleetIndex(by_id.values(), per_stream=per_stream, walk=walk)  # type: ignore[arg-type]
    assert_same_candidates(indexed, job, by_id, per_stream, STREAM_BUDGET)
    expected = reference_place(job, by_id.values(), per_stream=per_stream)
    assert place(job, indexed) == expected


@FEWER
@given(
    fleet=st.lists(nodes(), min_size=25, max_size=80),
    job=jobs(),
    per_stream=st.integers(1, 3),
    walk=st.sampled_from(["auto", "scan", "merge", "enumerate"]),
    budget=st.sampled_from([0, 1, 2, 16]),
)
def test_bounded_candidates_on_larger_fleets_match_brute_force(
    fleet: list[tuple[NodeShape, NodeLoad]],
    job: JobDemand,
    per_stream: int,
    walk: str,
    budget: int,
) -> None:
    """Many feasible nodes per job: the per-stream bound, budgets and fallbacks all bite."""
    by_id = unique(fleet)
    indexed = FleetIndex(
        by_id.values(),
        per_stream=per_stream,
        walk=walk,  # type: ignore[arg-type]
        stream_budget=budget,
    )
    assert_same_candidates(indexed, job, by_id, per_stream, budget)
    expected = reference_place(job, by_id.values(), per_stream=per_stream, stream_budget=budget)
    assert place(job, indexed) == expected


@FEWER
@given(
    fleet=st.lists(gpu_nodes(), min_size=3, max_size=50),
    job=gpu_jobs(),
    per_stream=st.integers(1, 3),
    walk=st.sampled_from(["auto", "scan", "merge", "enumerate"]),
    budget=st.sampled_from([1, 2, 16]),
)
def test_gpu_eligibility_matches_brute_force(
    fleet: list[tuple[NodeShape, NodeLoad]],
    job: JobDemand,
    per_stream: int,
    walk: str,
    budget: int,
) -> None:
    """GPU jobs on GPU fleets: shape thresholds, free-GPU shelves, mixed-GPU nodes."""
    by_id = unique(fleet)
    indexed = FleetIndex(
        by_id.values(),
        per_stream=per_stream,
        walk=walk,  # type: ignore[arg-type]
        stream_budget=budget,
    )
    assert_same_candidates(indexed, job, by_id, per_stream, budget)
    expected = reference_place(job, by_id.values(), per_stream=per_stream, stream_budget=budget)
    assert place(job, indexed) == expected


@FEWER
@given(fleet=st.lists(nodes(), max_size=30), job=jobs())
def test_exhaustive_candidates_score_every_feasible_node(
    fleet: list[tuple[NodeShape, NodeLoad]], job: JobDemand
) -> None:
    by_id = unique(fleet)
    indexed = FleetIndex(by_id.values(), per_stream=100)
    assert place(job, indexed) == reference_place(job, by_id.values(), per_stream=100)


Op = tuple[str, object]


@st.composite
def operations(draw: st.DrawFn) -> list[Op]:
    ops: list[Op] = []
    for _ in range(draw(st.integers(0, 60))):
        kind = draw(st.sampled_from(["upsert", "upsert", "load", "remove", "shape", "images"]))
        if kind in ("upsert", "shape"):
            ops.append((kind, draw(nodes())))
        elif kind == "images":  # a heartbeat's image cache: only the digests change
            ops.append((kind, (draw(st.sampled_from(NODE_IDS)), draw(st.sampled_from(CACHES)))))
        elif kind == "load":
            ops.append((kind, (draw(st.sampled_from(NODE_IDS)), draw(nodes())[1])))
        else:
            ops.append((kind, draw(st.sampled_from(NODE_IDS))))
    return ops


@FEWER
@given(ops=operations(), job=jobs(), per_stream=st.integers(1, 4))
def test_index_maintenance_matches_brute_force(
    ops: list[Op], job: JobDemand, per_stream: int
) -> None:
    indexed = FleetIndex(per_stream=per_stream)
    model: dict[str, tuple[NodeShape, NodeLoad]] = {}
    for kind, arg in ops:
        if kind == "upsert":
            shape, load = arg  # type: ignore[misc]
            indexed.upsert(shape, load)
            model[shape.id] = (shape, load)
        elif kind == "shape":  # re-register without a load: keeps the known load
            shape, load = arg  # type: ignore[misc]
            indexed.upsert(shape)
            model[shape.id] = (shape, model[shape.id][1] if shape.id in model else NodeLoad())
        elif kind == "load":
            node_id, load = arg  # type: ignore[misc]
            if node_id in model:
                indexed.update_load(node_id, load)
                model[node_id] = (model[node_id][0], load)
        elif kind == "images":
            node_id, cache = arg  # type: ignore[misc]
            if node_id in model:
                cached = replace(model[node_id][0], images=cache)
                indexed.upsert(cached)
                model[node_id] = (cached, model[node_id][1])
        else:
            assert indexed.remove(arg) == (arg in model)  # type: ignore[arg-type]
            model.pop(arg, None)  # type: ignore[call-overload]
        # Every step keeps the index consistent: decisions agree with brute force.
    assert sorted(indexed, key=lambda p: p[0].id) == sorted(model.values(), key=lambda p: p[0].id)
    assert place(job, indexed) == reference_place(job, model.values(), per_stream=per_stream)
    # A plan reserves on the index and puts it back: the decision after it is the same.
    plan([job, replace(job, job_id="again")], indexed)
    assert place(job, indexed) == reference_place(job, model.values(), per_stream=per_stream)


@FEWER
@given(
    fleet=st.lists(nodes(), max_size=25),
    queue=st.lists(st.integers(0, 10**6), max_size=12).flatmap(
        lambda ids: st.tuples(*[jobs(job_id=f"j{i}", gangs=True) for i in range(len(ids))])
    ),
    per_stream=st.integers(1, 4),
)
def test_plan_matches_brute_force(
    fleet: list[tuple[NodeShape, NodeLoad]], queue: tuple[JobDemand, ...], per_stream: int
) -> None:
    by_id = unique(fleet)
    indexed = FleetIndex(by_id.values(), per_stream=per_stream)
    before = sorted(indexed, key=lambda p: p[0].id)
    got = plan(queue, indexed)
    want = reference_plan(queue, by_id, per_stream=per_stream)
    assert got.assignments == want.assignments
    assert got.loads == want.loads
    assert got.waiting.keys() == want.waiting.keys()
    for job_id, outcome in got.waiting.items():
        assert outcome.static == want.waiting[job_id].static
    # The plan put back every load it reserved.
    assert sorted(indexed, key=lambda p: p[0].id) == before


@FEWER
@given(
    fleet=st.lists(nodes(), max_size=25),
    queue=st.lists(st.integers(0, 10**6), max_size=16).flatmap(
        lambda ids: st.tuples(*[jobs(job_id=f"j{i}", gangs=True) for i in range(len(ids))])
    ),
)
def test_the_grouped_queue_plans_as_the_flat_plan(
    fleet: list[tuple[NodeShape, NodeLoad]], queue: tuple[JobDemand, ...]
) -> None:
    """``plan_groups`` (a heap over fit-signature groups, a group dropped at its first
    failure) makes the same decisions as ``plan`` over the same jobs, and every waiting
    job's group carries the reason ``plan`` gives it."""
    indexed = FleetIndex(unique(fleet).values())
    grouped = JobQueue(queue)
    got = plan_groups(grouped, indexed)
    want = plan(queue, indexed)
    assert got.assignments == want.assignments
    assigned = {a.job_id for a in got.assignments}
    waiting = {j.job_id: got.waiting[j.fit_signature] for j in queue if j.job_id not in assigned}
    assert waiting.keys() == want.waiting.keys()
    for job_id, outcome in waiting.items():
        assert outcome.reason == want.waiting[job_id].reason
    # the queue is left as it was (the planner's caller pops what it assigns)
    assert len(grouped) == len(queue)


@st.composite
def standings(draw: st.DrawFn) -> Standing:
    """Some orgs' history and weight over a fleet capacity (fair share)."""
    shares = Standing(draw(st.sampled_from([(64.0, 256.0, 8.0), (16.0, 64.0, 0.0)])))
    for org in draw(st.sets(st.sampled_from([None, "org_a", "org_b", "org_c"]))):
        shares.set(
            org,
            history=draw(st.sampled_from([0.0, 0.5, 3.0, 40.0])),
            used=draw(st.sampled_from([(0.0, 0.0, 0.0), (4.0, 8.0, 1.0), (16.0, 2.0, 0.0)])),
            weight=draw(st.sampled_from([1.0, 1.0, 2.0, 0.5])),
        )
    return shares


@FEWER
@given(
    fleet=st.lists(nodes(), max_size=25),
    queue=st.lists(st.integers(0, 10**6), max_size=16).flatmap(
        lambda ids: st.tuples(*[jobs(job_id=f"j{i}", gangs=True) for i in range(len(ids))])
    ),
    shares=standings(),
)
def test_fair_share_grouped_plans_as_the_flat_plan(
    fleet: list[tuple[NodeShape, NodeLoad]], queue: tuple[JobDemand, ...], shares: Standing
) -> None:
    """With fair share between orgs, ``plan_groups`` and ``plan`` still decide alike."""
    indexed = FleetIndex(unique(fleet).values())
    grouped = JobQueue(queue)
    got = plan_groups(grouped, indexed, shares=shares.copy())
    want = plan(queue, indexed, shares=shares.copy())
    assert got.assignments == want.assignments
    assigned = {a.job_id for a in got.assignments}
    waiting = {j.job_id: got.waiting[j.fit_signature] for j in queue if j.job_id not in assigned}
    assert waiting.keys() == want.waiting.keys()
    for job_id, outcome in waiting.items():
        assert outcome.reason == want.waiting[job_id].reason


@FEWER
@given(
    fleet=st.lists(nodes(), max_size=25),
    queue=st.lists(st.integers(0, 10**6), max_size=16).flatmap(
        lambda ids: st.tuples(*[jobs(job_id=f"j{i}", gangs=True) for i in range(len(ids))])
    ),
    org=st.sampled_from([None, "org_a"]),
    shares=standings(),
)
def test_with_one_org_fair_share_changes_nothing(
    fleet: list[tuple[NodeShape, NodeLoad]],
    queue: tuple[JobDemand, ...],
    org: str | None,
    shares: Standing,
) -> None:
    """Jobs of one org: the plan with shares is today's plan, whatever the standings."""
    one_org = [replace(j, org_id=org) for j in queue]
    indexed = FleetIndex(unique(fleet).values())
    today = plan_groups(JobQueue(one_org), indexed)
    assert plan_groups(JobQueue(one_org), indexed, shares=shares).assignments == today.assignments
    assert plan(one_org, indexed, shares=shares).assignments == today.assignments
    assert plan(one_org, indexed).assignments == today.assignments
