"""Feasibility filters: small named units ``check(node, load, job) -> Rejection | None``.

Every filter has a *level*:

* ``class``: reads only the node's class attributes (tier, arch, capabilities, GPUs), so
  one verdict holds for every node of a class (the index evaluates it once per class);
* ``node``: reads other static attributes of the node (disabled flag, capacities, slots);
* ``load``: reads the node's current load: a *momentary* rejection ("busy now").

``class`` and ``node`` rejections are *static*: the machine can never run the job as it is.
:data:`FILTERS` is the evaluation order; a node's reason is its first rejection, so counts
per reason add up to the number of nodes rejected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from .model import LIMIT_CAPABILITIES, JobDemand, NodeLoad, NodeShape, missing_limits

# Static reasons: the node can never run the job as the node is.
DISABLED = "DISABLED"
OWNER = "OWNER"
TRUST_TIER = "TRUST_TIER"
ARCH = "ARCH"
CAPABILITY = "CAPABILITY"
LIMITS = "LIMITS"
NO_GPU = "NO_GPU"
GPU_COUNT = "GPU_COUNT"
GPU_VENDOR = "GPU_VENDOR"
CUDA_VERSION = "CUDA_VERSION"
GPU_VRAM = "GPU_VRAM"
CPU = "CPU"
RAM = "RAM"
DISK = "DISK"
NO_SLOTS = "NO_SLOTS"
# Momentary reasons: the node could run the job, but not with its current load.
SLOTS_FULL = "SLOTS_FULL"
GPU_FREE = "GPU_FREE"
CPU_FREE = "CPU_FREE"
RAM_FREE = "RAM_FREE"
OTHER_ORG = "OTHER_ORG"

#: Every reason, in filter order.
REASONS: tuple[str, ...] = (
    DISABLED, OWNER, TRUST_TIER, ARCH, CAPABILITY, LIMITS, NO_GPU, GPU_COUNT, GPU_VENDOR,
    CUDA_VERSION, GPU_VRAM, CPU, RAM, DISK, NO_SLOTS, SLOTS_FULL, GPU_FREE, CPU_FREE, RAM_FREE,
    OTHER_ORG,
)  # fmt: skip
MOMENTARY_REASONS: frozenset[str] = frozenset({SLOTS_FULL, GPU_FREE, CPU_FREE, RAM_FREE, OTHER_ORG})
STATIC_REASONS: frozenset[str] = frozenset(REASONS) - MOMENTARY_REASONS

Level = Literal["class", "node", "load"]


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why one node cannot take one job: a reason constant and a human detail."""

    reason: str
    detail: str

    @property
    def static(self) -> bool:
        return self.reason not in MOMENTARY_REASONS


Check = Callable[[NodeShape, NodeLoad, JobDemand], Rejection | None]


@dataclass(frozen=True, slots=True)
class Filter:
    """A named feasibility check; call it like the function it wraps."""

    name: str
    level: Level
    check: Check

    @property
    def static(self) -> bool:
        return self.level != "load"

    def __call__(self, node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
        return self.check(node, load, job)


def _plural(n: float, word: str) -> str:
    return f"{n:g} {word}" + ("" if n == 1 else "s")


def gpu_verdict(node: NodeShape, job: JobDemand) -> tuple[str | None, int]:
    """``(reason or None, qualifying GPU count)`` for a job that needs GPUs.

    GPUs qualify when they match the vendor, then the CUDA minimum, then the VRAM minimum;
    the reason is the first step that leaves fewer than the job needs.
    """
    need = job.gpus
    total = len(node.gpus)
    if total == 0:
        return NO_GPU, 0
    if total < need:
        return GPU_COUNT, total
    req = job.requires.gpu
    specs = node.gpu_specs
    if req.vendor:
        specs = tuple(s for s in specs if s[0] == req.vendor)
        if len(specs) < need:
            return GPU_VENDOR, len(specs)
    want = job.cuda_min_version
    if want is not None:
        specs = tuple(s for s in specs if s[2] is not None and s[2] >= want)
        if len(specs) < need:
            return CUDA_VERSION, len(specs)
    if req.min_vram_gb > 0:
        specs = tuple(s for s in specs if s[1] >= req.min_vram_gb)
        if len(specs) < need:
            return GPU_VRAM, len(specs)
    return None, len(specs)


def qualifying_vram(node: NodeShape, job: JobDemand) -> list[float]:
    """VRAM of each GPU of ``node`` that meets the job's GPU requirement, ascending."""
    req = job.requires.gpu
    want = job.cuda_min_version
    return sorted(
        vram
        for vendor, vram, cuda in node.gpu_specs
        if (not req.vendor or vendor == req.vendor)
        and (want is None or (cuda is not None and cuda >= want))
        and vram >= req.min_vram_gb
    )


# --- static, node level -------------------------------------------------------------------


def check_owner(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    """A node another org owns runs only that org's jobs and those of orgs it granted."""
    owner = node.owner
    if owner is None or job.org_id is None or owner == job.org_id:
        return None
    if job.org_id in node.grantees:
        return None
    return Rejection(OWNER, f"node {node.id} belongs to another org")


def check_disabled(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    if node.disabled:
        return Rejection(DISABLED, f"node {node.id} is disabled")
    return None


def check_cpu(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    if node.cpu_cores < job.cpu_min:
        return Rejection(
            CPU, f"node has {_plural(node.cpu_cores, 'CPU core')}, job needs {job.cpu_min:g}"
        )
    return None


def check_ram(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    if node.ram_gb < job.ram_min:
        return Rejection(RAM, f"node has {node.ram_gb:g} GB RAM, job needs {job.ram_min:g} GB")
    return None


def check_disk(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    if node.disk_gb < job.disk_min:
        return Rejection(DISK, f"node has {node.disk_gb:g} GB disk, job needs {job.disk_min:g} GB")
    return None


def check_slots(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    if node.max_concurrency <= 0:
        return Rejection(NO_SLOTS, "node accepts no jobs (max_concurrency 0)")
    return None


# --- static, class level ------------------------------------------------------------------


def check_trust(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    want = job.requires.min_tier
    if node.tier < want:
        return Rejection(TRUST_TIER, f"node tier {node.tier.label} is below {want.label}")
    return None


def check_arch(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    allowed = job.requires.arch
    if allowed and node.arch not in allowed:
        return Rejection(ARCH, f"node arch {node.arch} is not one of {', '.join(allowed)}")
    return None


def check_capabilities(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    missing = job.requires.capabilities - node.capabilities
    if missing:
        return Rejection(CAPABILITY, f"node lacks capabilities {', '.join(sorted(missing))}")
    return None


def check_limits(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    missing = missing_limits(node, job)
    if missing:
        named = ", ".join(f"limits.{n} ({LIMIT_CAPABILITIES[n]})" for n in missing)
        return Rejection(LIMITS, f"node cannot enforce {named}")
    return None


def check_gpu(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    if job.gpus == 0:
        return None
    reason, qualifying = gpu_verdict(node, job)
    if reason is None:
        return None
    need = job.gpus
    req = job.requires.gpu
    if reason == NO_GPU:
        detail = "node has no GPU"
    elif reason == GPU_COUNT:
        detail = f"node has {_plural(qualifying, 'GPU')}, job needs {need}"
    elif reason == GPU_VENDOR:
        detail = f"node has {qualifying} {req.vendor} GPU(s), job needs {need}"
    elif reason == CUDA_VERSION:
        detail = f"node has {qualifying} GPU(s) with CUDA >= {req.cuda_min}, job needs {need}"
    else:
        detail = (
            f"node has {qualifying} GPU(s) with >= {req.min_vram_gb:g} GB VRAM, job needs {need}"
        )
    return Rejection(reason, detail)


# --- momentary (load level) ---------------------------------------------------------------


def check_slots_free(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    if load.active_jobs >= node.max_concurrency:
        return Rejection(
            SLOTS_FULL, f"all {node.max_concurrency} job slots busy ({load.active_jobs} running)"
        )
    return None


def check_gpu_free(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    """Free qualifying GPUs, conservatively: GPU load is a count, so on a node of mixed GPUs
    the busy ones are assumed to be qualifying ones (never promise a GPU that may be taken)."""
    if job.gpus == 0:
        return None
    _, qualifying = gpu_verdict(node, job)
    free = qualifying - load.used_gpu
    if free < job.gpus:
        return Rejection(GPU_FREE, f"{max(free, 0)} matching GPU(s) free, job needs {job.gpus}")
    return None


def check_cpu_free(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    free = node.cpu_cores - load.used_cpu
    if free < job.cpu:
        return Rejection(CPU_FREE, f"{max(free, 0):g} CPU cores free, job needs {job.cpu:g}")
    return None


def check_ram_free(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    free = node.ram_gb - load.used_ram
    if free < job.ram:
        return Rejection(RAM_FREE, f"{max(free, 0):g} GB RAM free, job needs {job.ram:g} GB")
    return None


def check_other_org(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    """A node whose jobs share one uid (``one_org``) runs one org's jobs at a time: one
    job could read another's environment and files there."""
    if node.one_org and load.runs_other_org(job.org_id):
        return Rejection(
            OTHER_ORG,
            f"node {node.id} runs one org's jobs at a time (its jobs share one uid) and is "
            "running another org's",
        )
    return None


#: The filters, in evaluation order. The index relies on this layout: ``disabled`` first,
#: then every ``class`` filter, then the other ``node`` filters, then the ``load`` ones.
FILTERS: tuple[Filter, ...] = (
    Filter("disabled", "node", check_disabled),
    Filter("owner", "class", check_owner),
    Filter("trust", "class", check_trust),
    Filter("arch", "class", check_arch),
    Filter("capabilities", "class", check_capabilities),
    Filter("limits", "class", check_limits),
    Filter("gpu", "class", check_gpu),
    Filter("cpu", "node", check_cpu),
    Filter("ram", "node", check_ram),
    Filter("disk", "node", check_disk),
    Filter("slots", "node", check_slots),
    Filter("slots_free", "load", check_slots_free),
    Filter("gpu_free", "load", check_gpu_free),
    Filter("cpu_free", "load", check_cpu_free),
    Filter("ram_free", "load", check_ram_free),
    Filter("other_org", "load", check_other_org),
)
CLASS_FILTERS: tuple[Filter, ...] = tuple(f for f in FILTERS if f.level == "class")
NODE_FILTERS: tuple[Filter, ...] = tuple(f for f in FILTERS[1:] if f.level == "node")
STATIC_FILTERS: tuple[Filter, ...] = tuple(f for f in FILTERS if f.static)
MOMENTARY_FILTERS: tuple[Filter, ...] = tuple(f for f in FILTERS if not f.static)

assert FILTERS[0].name == "disabled"
assert FILTERS[1 : 1 + len(CLASS_FILTERS)] == CLASS_FILTERS
assert FILTERS[1 + len(CLASS_FILTERS) : len(STATIC_FILTERS)] == NODE_FILTERS


def first_rejection(
    node: NodeShape,
    load: NodeLoad,
    job: JobDemand,
    filters: tuple[Filter, ...] = FILTERS,
) -> Rejection | None:
    """The first filter that rejects ``node`` for ``job``, or ``None`` when it is feasible."""
    for f in filters:
        rejection = f.check(node, load, job)
        if rejection is not None:
            return rejection
    return None


def feasible(node: NodeShape, load: NodeLoad, job: JobDemand) -> bool:
    return first_rejection(node, load, job) is None
