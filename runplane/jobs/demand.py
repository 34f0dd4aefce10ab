"""What a job asks of a node: its placement demand (``runplane/placement``'s model), read
from its typed spec (the body's models validated it at submit: only what they cannot check,
a CUDA version and the weights, can still be refused here)."""

from __future__ import annotations

from runplane.placement import (
    EXECUTOR_CONTAINER,
    DemandError,
    DemandProblem,
    GpuRequirement,
    ImageDemand,
    JobDemand,
    Requires,
    Tier,
    isolation_capability,
)
from runplane.placement.model import enforced_limits

from .jobspec import JobSpec


def requires_of(spec: JobSpec) -> Requires:
    """The machine properties ``spec`` requires (an ``isolation`` other than ``none`` is one
    more capability: only a node whose executor gives it may run the job; so is
    ``executor-container`` for a job that runs in images: it never runs on the host)."""
    req = spec.requires
    capabilities = set(req.capabilities)
    if spec.isolation != "none":
        capabilities.add(isolation_capability(spec.isolation))
    if spec.containers():
        capabilities.add(EXECUTOR_CONTAINER)
    return Requires(
        gpu=GpuRequirement(
            required=req.gpu.required,
            min_vram_gb=float(req.gpu.min_vram_gb),
            vendor=req.gpu.vendor,
            cuda_min=req.gpu.cuda_min,
        ),
        min_cores=float(req.cpu.min_cores),
        min_ram_gb=float(req.ram.min_gb),
        min_disk_gb=float(req.disk.min_gb),
        arch=tuple(req.arch),
        min_tier=Tier.parse(req.trust.min_tier),
        capabilities=frozenset(capabilities),
        limits=enforced_limits(spec.limits.model_dump()),
    )


def images_of(spec: JobSpec) -> tuple[ImageDemand, ...]:
    """The images ``spec`` runs in (its own and its pod services', resolved at submit),
    with their platforms: placement's architecture filter and cached-image weight."""
    return tuple(ImageDemand(c.ref, tuple(c.platforms)) for c in spec.containers())


def demand_of(job_id: str, priority: int, spec: JobSpec, org_id: str | None = None) -> JobDemand:
    """The placement demand of a job (its id, priority, spec and org: nodes of another org
    do not run it). Raises ``placement.DemandError`` for a CUDA version or weights
    placement cannot read."""
    problems: list[DemandProblem] = []
    try:
        requires = requires_of(spec)
    except DemandError as exc:  # listed with the weights' problems, if any
        problems, requires = list(exc.problems), Requires()
    limits = spec.limits
    try:
        demand = JobDemand(
            job_id=job_id,
            priority=priority,
            created_at=job_id,  # ids sort by creation time
            cpu_cores=float(limits.cpu_cores or 0),
            ram_gb=float(limits.ram_gb or 0),
            gpu_count=limits.gpu_count or 0,
            requires=requires,
            weights=dict(spec.weights),
            weights_preset=spec.weights_preset,
            org_id=org_id,
            images=images_of(spec),
            preemptible=bool(spec.preemptible),
            preempt_grace_sec=spec.preempt_grace_sec or 0,
            nodes=spec.nodes or 1,
        )
    except DemandError as exc:
        raise DemandError(problems + list(exc.problems)) from None
    if problems:
        raise DemandError(problems)
    return demand
