"""Placement knows images (issue 38): an image job needs a node that runs images, its
images' platforms constrain the node's architecture, and a node whose cache holds the
image already is preferred. Demands are built from real specs (``demand_of``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from runplane.jobs.demand import demand_of
from runplane.jobs.jobspec import ContainerImage, JobSpec, PodService
from runplane.placement import (
    CAPABILITY,
    IMAGE_ARCH,
    FleetIndex,
    JobDemand,
    NodeShape,
    Placement,
    Unplaced,
    place,
    plan,
    reference_place,
)

HEX = "0123456789abcdef" * 4
DIGEST = "sha256:" + HEX
OTHER = "sha256:" + "f" * 64
AMD64 = ContainerImage(
    asked="busybox:1.36",
    ref="docker.io/library/busybox@" + DIGEST,
    platforms=["linux/amd64"],
)
ARM64 = ContainerImage(
    asked="arm-only:1",
    ref="registry.example/arm-only@" + OTHER,
    platforms=["linux/arm64/v8"],
)
MULTI = ContainerImage(
    asked="busybox:multi",
    ref="docker.io/library/busybox@" + DIGEST,
    platforms=["linux/amd64", "linux/arm64/v8", "unknown/unknown"],
)
CONTAINER = frozenset({"executor-container"})


def spec(**kw: Any) -> JobSpec:
    return JobSpec(command=["true"], **kw)


def job(job_id: str = "j", **kw: Any) -> JobDemand:
    return demand_of(job_id, 100, spec(**kw))


def node(node_id: str, **kw: Any) -> NodeShape:
    base: dict[str, Any] = {"cpu_cores": 8, "ram_gb": 32, "max_concurrency": 4}
    base.update(kw)
    return NodeShape(id=node_id, **base)


def placed(demand: JobDemand, fleet: FleetIndex) -> str:
    outcome = place(demand, fleet)
    assert isinstance(outcome, Placement), outcome
    bounds = {"per_stream": fleet.per_stream, "stream_budget": fleet.stream_budget}
    assert outcome == reference_place(demand, list(fleet), **bounds)
    return outcome.node_id


def waits(demand: JobDemand, fleet: FleetIndex) -> Unplaced:
    outcome = place(demand, fleet)
    assert isinstance(outcome, Unplaced), outcome
    assert outcome == reference_place(demand, list(fleet))
    return outcome


# --- the capability -----------------------------------------------------------------------


def test_an_image_job_requires_a_node_that_runs_images() -> None:
    assert job(container=AMD64).requires.capabilities == CONTAINER
    assert job().requires.capabilities == frozenset()  # a host job
    pod = [PodService(name="db", command=["db"], container=AMD64)]
    assert job(pod=pod).requires.capabilities == CONTAINER  # a pod service's image


def test_an_image_job_never_lands_on_a_process_node_and_says_why() -> None:
    fleet = FleetIndex([node("plain-1"), node("plain-2")])
    demand = job(container=AMD64)
    outcome = waits(demand, fleet)
    assert outcome.static and outcome.counts == {CAPABILITY: 2}
    assert outcome.reason == (
        "no node meets: capabilities executor-container (the job runs in an image and no "
        "node runs images: start an agent with --executor container) (2 nodes lack them)"
    )
    fleet.upsert(node("runs-images", capabilities=CONTAINER))
    assert placed(demand, fleet) == "runs-images"
    # a container node runs host jobs too
    assert placed(job(), FleetIndex([node("runs-images", capabilities=CONTAINER)]))


def test_a_gvisor_job_goes_only_to_a_node_whose_runsc_works() -> None:
    demand = job(container=AMD64, isolation="gvisor")
    assert demand.requires.capabilities == CONTAINER | {"isolation-gvisor"}
    fleet = FleetIndex([node("plain"), node("bwrap", capabilities=CONTAINER)])
    outcome = waits(demand, fleet)
    assert outcome.reason == (
        "no node meets: capabilities executor-container (the job runs in an image and no "
        "node runs images: start an agent with --executor container) and isolation-gvisor "
        "(isolation gvisor: an agent started with --executor container on a machine where "
        "gVisor's runsc works; the process executor gives none) (2 nodes lack them)"
    )
    fleet.upsert(node("gvisor", capabilities=CONTAINER | {"isolation-gvisor"}))
    assert placed(demand, fleet) == "gvisor"
    # a job asking no isolation may still use the gvisor node; kata waits, saying so
    kata = waits(job(container=AMD64, isolation="kata"), fleet)
    assert "isolation-kata (isolation kata: no runplane executor gives it" in kata.reason


# --- the architecture ---------------------------------------------------------------------


def test_an_image_for_another_architecture_is_filtered_with_its_reason() -> None:
    fleet = FleetIndex([node("arm-1", arch="aarch64", capabilities=CONTAINER)])
    demand = job(container=AMD64)
    assert demand.image_archs == frozenset({"x86_64"})
    outcome = waits(demand, fleet)
    assert outcome.static and outcome.counts == {IMAGE_ARCH: 1}
    assert outcome.reason == (
        "no node meets: arch x86_64 for its images (image docker.io/library/busybox@"
        "sha256:0123456789ab… is for linux/amd64) (1 node has another arch)"
    )
    fleet.upsert(node("amd-1", arch="amd64", capabilities=CONTAINER))
    assert placed(demand, fleet) == "amd-1"


def test_a_multi_platform_image_fits_both_architectures() -> None:
    demand = job(container=MULTI)
    assert demand.image_archs == frozenset({"x86_64", "arm64"})  # unknown/unknown ignored
    for arch in ("x86_64", "amd64", "arm64", "aarch64"):
        fleet = FleetIndex([node("n", arch=arch, capabilities=CONTAINER)])
        assert placed(demand, fleet) == "n"
    # an image whose platforms are unknown constrains nothing
    unknown = job(container=AMD64.model_copy(update={"platforms": []}))
    assert unknown.image_archs is None
    assert placed(unknown, FleetIndex([node("n", arch="arm64", capabilities=CONTAINER)])) == "n"


def test_every_pod_service_image_must_exist_for_the_node_arch() -> None:
    pod = [
        PodService(name="app", command=["app"], container=MULTI),
        PodService(name="db", command=["db"], container=ARM64),
    ]
    demand = job(pod=pod)
    assert demand.image_archs == frozenset({"arm64"})
    fleet = FleetIndex(
        [node("amd", capabilities=CONTAINER), node("arm", arch="arm64", capabilities=CONTAINER)]
    )
    assert placed(demand, fleet) == "arm"
    fleet.remove("arm")
    reason = waits(demand, fleet).reason
    assert reason.startswith("no node meets: arch arm64 for its images (image ")
    assert "image registry.example/arm-only@sha256:ffffffffffff… is for linux/arm64/v8" in reason


def test_the_image_arch_and_requires_arch_both_apply() -> None:
    fleet = FleetIndex(
        [node("amd", capabilities=CONTAINER), node("arm", arch="arm64", capabilities=CONTAINER)]
    )
    both = job(container=MULTI, requires={"arch": ["arm64"]})
    assert placed(both, fleet) == "arm"
    # an amd64 image and requires.arch arm64: no node ever
    never = waits(job(container=AMD64, requires={"arch": ["arm64"]}), fleet)
    assert never.static and never.counts == {"ARCH": 1, IMAGE_ARCH: 1}


# --- the cached image ---------------------------------------------------------------------


def test_the_node_holding_the_image_is_preferred() -> None:
    demand = job(container=AMD64)
    assert demand.image_digests == frozenset({DIGEST})
    # equal nodes but for their caches; without a cache the lower id wins the tie
    fleet = FleetIndex(
        [
            node("a", capabilities=CONTAINER, images=frozenset({OTHER})),
            node("b", capabilities=CONTAINER, images=frozenset({DIGEST})),
        ]
    )
    outcome = place(demand, fleet)
    assert isinstance(outcome, Placement) and outcome.node_id == "b"
    assert dict(outcome.breakdown)["image_cached"] == 1.0
    # a heartbeat's new cache moves the preference (an upsert of the new digests)
    fleet.upsert(node("a", capabilities=CONTAINER, images=frozenset({DIGEST, OTHER})))
    fleet.upsert(node("b", capabilities=CONTAINER))
    assert placed(demand, fleet) == "a"
    # switched off, the tie goes back to the lower id whatever the caches hold
    fleet.upsert(node("b", capabilities=CONTAINER, images=frozenset({DIGEST})))
    fleet.upsert(node("a", capabilities=CONTAINER))
    off = job(container=AMD64, weights={"image_cached": 0})
    assert placed(off, fleet) == "a"
    assert "image_cached" not in dict(place(off, fleet).breakdown)  # type: ignore[union-attr]


def test_a_host_job_scores_as_before() -> None:
    """The weight is in every preset, but weighs only for a job that has images."""
    host = job()
    assert host.weight_table["image_cached"] == 1.0
    assert "image_cached" not in dict(host.active_weights)
    fleet = FleetIndex([node("a", images=frozenset({DIGEST}))])
    outcome = place(host, fleet)
    assert isinstance(outcome, Placement)
    assert [name for name, _ in outcome.breakdown] == ["binpack", "gpu_fit", "reliability"]


def test_a_pod_scores_the_share_of_its_images_cached() -> None:
    pod = [
        PodService(name="app", command=["app"], container=MULTI),
        PodService(name="side", command=["side"], container=ARM64),
    ]
    demand = job(pod=pod, weights={"binpack": 0, "gpu_fit": 0, "reliability": 0})
    fleet = FleetIndex(
        [
            node("half", arch="arm64", capabilities=CONTAINER, images=frozenset({DIGEST})),
            node("none", arch="arm64", capabilities=CONTAINER),
        ]
    )
    outcome = place(demand, fleet)
    assert isinstance(outcome, Placement)
    assert (outcome.node_id, outcome.breakdown) == ("half", (("image_cached", 0.5),))


def test_the_cached_node_is_found_in_a_large_fleet() -> None:
    """The ``image_cached`` stream: among 300 equal nodes, the few holding the image are
    candidates even where the other streams stop long before them."""
    nodes = [node(f"n{i:03d}", capabilities=CONTAINER) for i in range(300)]
    nodes[-1] = replace(nodes[-1], images=frozenset({DIGEST}))
    nodes[-2] = replace(nodes[-2], images=frozenset({OTHER}))
    fleet = FleetIndex(nodes, per_stream=4, stream_budget=2)
    demand = job(container=AMD64)
    assert fleet.stream_takes(demand)["image_cached"] == ["n299"]
    assert placed(demand, fleet) == "n299"
    # a plan of many jobs of the image: the holder takes them while it has room
    jobs = [replace(demand, job_id=f"j{i}") for i in range(6)]
    assert [a.node_id for a in plan(jobs, fleet).assignments][:4] == ["n299"] * 4


def test_the_node_view_gives_the_shape_its_cache() -> None:
    view = {"id": "n", "arch": "amd64", "images": {"digests": [DIGEST], "free_bytes": 0}}
    assert NodeShape.from_view(view).images == frozenset({DIGEST})
    assert NodeShape.from_view({"id": "n", "images": None}).images == frozenset()


def test_a_fleet_that_all_holds_the_image_takes_the_same_whichever_way() -> None:
    """Many holders: the stream scans the ``fit`` lists instead of sorting them all; a
    scan, a sort and the brute-force reference take the same nodes."""
    nodes = [
        replace(
            node(f"n{i:03d}", cpu_cores=4 + i % 5, capabilities=CONTAINER),
            images=frozenset({DIGEST} if i % 7 else {OTHER}),
        )
        for i in range(400)
    ]
    demand = job(container=AMD64, requires={"cpu": {"min_cores": 5}})
    holding = [n for n in nodes if DIGEST in n.images and n.cpu_cores >= 5]
    want = [n.id for n in sorted(holding, key=lambda n: (n.cpu_cores, n.ram_gb, n.id))][:3]
    for walk in ("auto", "scan", "enumerate"):
        fleet = FleetIndex(nodes, per_stream=3, walk=walk)  # type: ignore[arg-type]
        assert fleet.stream_takes(demand)["image_cached"] == want
        assert placed(demand, fleet) in want
