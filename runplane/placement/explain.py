"""Placement outcomes and the sentences that explain why a job waits.

A static explanation names the unmet requirements, grouped, each with how many nodes fail
it: ``no node meets: 2 GPUs with >= 24 GB VRAM (40 nodes have smaller GPUs, 3 nodes have
no GPU), arch arm64 (12 nodes have another arch)``. A momentary one says how many nodes
match and what keeps them busy: ``waiting for free capacity: 3 nodes match but are busy
(2 nodes have no free job slot, 1 node has less than 4 GB RAM free)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from . import filters as f
from .model import ISOLATION_PREFIX, LIMIT_CAPABILITIES, JobDemand

EMPTY_FLEET = "no nodes in the fleet"


@dataclass(frozen=True, slots=True)
class Placement:
    """The job goes to ``node_id``. ``breakdown`` is each weighted scorer's value there;
    ``considered`` the number of candidate nodes that were scored."""

    node_id: str
    score: float
    breakdown: tuple[tuple[str, float], ...] = ()
    considered: int = 0


@dataclass(frozen=True, slots=True)
class Unplaced:
    """The job waits. ``static``: no node of the fleet could ever run it as the fleet is
    (only a fleet change helps); otherwise ``matching`` nodes could, but are busy now.
    ``counts``: nodes per rejection reason (each node counted once, at its first reason)."""

    reason: str
    static: bool
    counts: Mapping[str, int] = field(default_factory=dict)
    matching: int = 0


# (singular, plural) predicate for "1 node ..." / "N nodes ...".
_NODE_PHRASES: dict[str, tuple[str, str]] = {
    f.DISABLED: ("is disabled", "are disabled"),
    f.OWNER: ("belongs to another org", "belong to another org"),
    f.TRUST_TIER: ("is of a lower tier", "are of a lower tier"),
    f.ARCH: ("has another arch", "have another arch"),
    f.CAPABILITY: ("lacks them", "lack them"),
    f.LIMITS: ("cannot enforce them", "cannot enforce them"),
    f.NO_GPU: ("has no GPU", "have no GPU"),
    f.GPU_COUNT: ("has fewer GPUs", "have fewer GPUs"),
    f.GPU_VENDOR: ("has GPUs of another vendor", "have GPUs of another vendor"),
    f.CUDA_VERSION: ("has an older CUDA", "have an older CUDA"),
    f.GPU_VRAM: ("has smaller GPUs", "have smaller GPUs"),
    f.CPU: ("has fewer CPU cores", "have fewer CPU cores"),
    f.RAM: ("has less RAM", "have less RAM"),
    f.DISK: ("has less disk", "have less disk"),
    f.NO_SLOTS: ("accepts no jobs", "accept no jobs"),
}


def _nodes(n: int, phrase: tuple[str, str]) -> str:
    return f"1 node {phrase[0]}" if n == 1 else f"{n} nodes {phrase[1]}"


def gpu_phrase(job: JobDemand) -> str:
    """``2 GPUs with >= 24 GB VRAM, from nvidia, with CUDA >= 12.1``."""
    req = job.requires.gpu
    text = f"{job.gpus} GPU" + ("" if job.gpus == 1 else "s")
    if req.min_vram_gb > 0:
        text += f" with >= {req.min_vram_gb:g} GB VRAM"
    if req.vendor:
        text += f", from {req.vendor}"
    if req.cuda_min:
        text += f", with CUDA >= {req.cuda_min}"
    return text


def _capability(name: str) -> str:
    """A required capability as the wait reason says it: an isolation one says what
    gives it."""
    if name.startswith(ISOLATION_PREFIX):
        kind = name.removeprefix(ISOLATION_PREFIX)
        return f"{name} (isolation {kind}: a container executor; the process executor gives none)"
    return name


def requirement(reason: str, job: JobDemand) -> str:
    """The job's requirement that a static ``reason`` says a node fails."""
    req = job.requires
    if reason in (f.NO_GPU, f.GPU_COUNT, f.GPU_VENDOR, f.CUDA_VERSION, f.GPU_VRAM):
        return gpu_phrase(job)
    if reason == f.TRUST_TIER:
        return f"trust tier {req.min_tier.label} or higher"
    if reason == f.ARCH:
        return "arch " + " or ".join(req.arch)
    if reason == f.CAPABILITY:
        return "capabilities " + " and ".join(_capability(c) for c in sorted(req.capabilities))
    if reason == f.LIMITS:
        named = " and ".join(f"limits.{n} ({LIMIT_CAPABILITIES[n]})" for n in sorted(req.limits))
        return (
            f"enforcing {named}: a node whose agent can (cgroups, bubblewrap), or one started "
            "with --best-effort-limits"
        )
    if reason == f.CPU:
        return f"{job.cpu_min:g} CPU cores"
    if reason == f.RAM:
        return f"{job.ram_min:g} GB RAM"
    if reason == f.DISK:
        return f"{job.disk_min:g} GB disk"
    if reason == f.NO_SLOTS:
        return "a job slot"
    if reason == f.DISABLED:
        return "an enabled node"
    if reason == f.OWNER:
        return "a node of your org or granted to it"
    raise ValueError(f"not a static reason: {reason!r}")


def busy_phrase(reason: str, job: JobDemand) -> tuple[str, str]:
    """(singular, plural) predicate for a momentary ``reason``."""
    if reason == f.SLOTS_FULL:
        return ("has no free job slot", "have no free job slot")
    if reason == f.GPU_FREE:
        text = f"fewer than {job.gpus} matching GPU" + ("" if job.gpus == 1 else "s") + " free"
        return ("has " + text, "have " + text)
    if reason == f.CPU_FREE:
        text = f"less than {job.cpu:g} CPU cores free"
        return ("has " + text, "have " + text)
    if reason == f.RAM_FREE:
        text = f"less than {job.ram:g} GB RAM free"
        return ("has " + text, "have " + text)
    if reason == f.OTHER_ORG:
        text = "another org's jobs (one org at a time: its jobs share one uid)"
        return ("runs " + text, "run " + text)
    raise ValueError(f"not a momentary reason: {reason!r}")


def _ordered(counts: Mapping[str, int], reasons: frozenset[str]) -> list[tuple[str, int]]:
    order = {r: i for i, r in enumerate(f.REASONS)}
    return sorted(
        ((r, n) for r, n in counts.items() if r in reasons and n > 0),
        key=lambda rn: (-rn[1], order.get(rn[0], len(order))),
    )


def explain_static(counts: Mapping[str, int], job: JobDemand) -> str:
    """``no node meets: <requirement> (<n nodes fail it how>), ...``, biggest group first."""
    groups: dict[str, list[str]] = {}
    for reason, n in _ordered(counts, f.STATIC_REASONS):
        groups.setdefault(requirement(reason, job), []).append(_nodes(n, _NODE_PHRASES[reason]))
    if not groups:
        return EMPTY_FLEET
    return "no node meets: " + ", ".join(
        f"{need} ({', '.join(parts)})" for need, parts in groups.items()
    )


def explain_busy(counts: Mapping[str, int], job: JobDemand, matching: int) -> str:
    """``waiting for free capacity: N nodes match but are busy (<why>, ...)``."""
    busy = "1 node matches but is busy" if matching == 1 else f"{matching} nodes match but are busy"
    head = "waiting for free capacity: " + busy
    parts = [_nodes(n, busy_phrase(r, job)) for r, n in _ordered(counts, f.MOMENTARY_REASONS)]
    return head + (f" ({', '.join(parts)})" if parts else "")


def unplaced(counts: Mapping[str, int], job: JobDemand, matching: int) -> Unplaced:
    """The :class:`Unplaced` outcome for rejection ``counts`` with ``matching`` nodes
    passing every static filter."""
    counts = {r: counts[r] for r in f.REASONS if counts.get(r)}
    if matching == 0:
        return Unplaced(explain_static(counts, job), True, counts, 0)
    return Unplaced(explain_busy(counts, job, matching), False, counts, matching)


def explain(counts: Mapping[str, int], job: JobDemand) -> str:
    """One sentence for rejection ``counts`` (static when no node failed only momentarily)."""
    busy = sum(n for r, n in counts.items() if r in f.MOMENTARY_REASONS)
    return unplaced(counts, job, busy).reason
