"""Feasibility filters, each declared once in :data:`FILTERS` (the evaluation order).

A :class:`Filter` names a check ``check(node, load, job) -> Rejection | None`` and says
everything else placement needs of it:

* its *level*: ``class`` reads only the node's class attributes (tier, arch, capabilities,
  GPUs, owner), so one verdict holds for every node of a class (the index evaluates it
  once per class); ``node`` reads other static attributes (disabled flag, capacities,
  slots); ``load`` reads the node's current load: a *momentary* rejection ("busy now").
  ``class`` and ``node`` rejections are *static*: the machine can never run the job as
  it is;
* its *reasons* (:class:`Reason`) and how a wait reason says each: how one node / N
  nodes fail it, and for a static one the job's requirement they fail
  (``explain.py`` builds the sentence from these);
* whether it is an *eligibility* filter (the index keeps the nodes that fail it off
  what a stream walks: class verdicts, walkable and free-GPU shelves) or a *fit* filter
  with ``fits``, its fast form on an index entry, which every node a stream visits must
  pass (:func:`fits_all`, their conjunction written out); the momentary breakdown of a
  wait reason and the reference in ``plan.py`` follow the same split.

A node's reason is its first rejection in :data:`FILTERS` order, so counts per reason add
up to the number of nodes rejected. The index relies on that order: ``disabled`` first,
then the ``class`` filters (``owner`` first), the other ``node`` ones, then the ``load``
ones, eligibility before fit among those (``tests/placement/test_placement_filters.py``
holds it). Adding a filter: docs/placement.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, Protocol

from .model import (
    EXECUTOR_CONTAINER,
    ISOLATION_PREFIX,
    LIMIT_CAPABILITIES,
    JobDemand,
    NodeLoad,
    NodeShape,
    missing_limits,
)

# Static reasons: the node can never run the job as the node is.
DISABLED = "DISABLED"
OWNER = "OWNER"
TRUST_TIER = "TRUST_TIER"
ARCH = "ARCH"
IMAGE_ARCH = "IMAGE_ARCH"
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
Phrase = tuple[str, str]  # (singular, plural) predicate: "1 node <p[0]>", "N nodes <p[1]>"


class Candidate(Protocol):
    """What a fit check reads of a node the index visits (``shelves.Entry``)."""

    @property
    def node(self) -> NodeShape: ...
    @property
    def load(self) -> NodeLoad: ...
    @property
    def free_cpu(self) -> float: ...
    @property
    def free_ram(self) -> float: ...


Fits = Callable[[Candidate, JobDemand], bool]


@dataclass(frozen=True, slots=True)
class Reason:
    """A reason a filter rejects with, and how a wait reason says it.

    A static reason: ``nodes``, how nodes fail it (``has fewer CPU cores``), and ``need``,
    the job's requirement it names (``8 CPU cores``; reasons of one requirement are
    grouped under it). A momentary one: ``busy``, how nodes are busy (it may read the
    job: ``has less than 4 GB RAM free``).
    """

    code: str
    nodes: Phrase = ("", "")
    need: Callable[[JobDemand], str] | None = None
    busy: Callable[[JobDemand], Phrase] | None = None


@dataclass(frozen=True, slots=True)
class Filter:
    """A named feasibility check and what placement needs of it; call it like the
    function it wraps. ``fits``: ``None`` for an eligibility filter, else its fast form
    on an index entry, true exactly when ``check`` passes (a test holds them equal)."""

    name: str
    level: Level
    check: Check
    reasons: tuple[Reason, ...]
    fits: Fits | None = None

    def __post_init__(self) -> None:
        static = self.static
        for r in self.reasons:
            if static and (r.need is None or not r.nodes[0] or r.busy is not None):
                raise ValueError(f"filter {self.name}: static reason {r.code} needs nodes, need")
            if not static and (r.busy is None or r.need is not None):
                raise ValueError(f"filter {self.name}: momentary reason {r.code} needs busy")
        if not self.reasons:
            raise ValueError(f"filter {self.name} gives no reason")
        if self.fits is not None and (self.level == "class" or len(self.reasons) != 1):
            raise ValueError(f"filter {self.name}: only a node or load filter of one reason fits")

    @property
    def static(self) -> bool:
        return self.level != "load"

    @property
    def eligibility(self) -> bool:
        return self.fits is None

    def __call__(self, node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
        return self.check(node, load, job)


def _has(text: str) -> Phrase:
    return ("has " + text, "have " + text)


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
    """A required capability as the wait reason says it: one the executor gives says
    which agent gives it."""
    if name == EXECUTOR_CONTAINER:
        return (
            f"{name} (the job runs in an image and no node runs images: start an agent "
            "with --executor container)"
        )
    if name == ISOLATION_PREFIX + "gvisor":
        return (
            f"{name} (isolation gvisor: an agent started with --executor container on a "
            "machine where gVisor's runsc works; the process executor gives none)"
        )
    if name.startswith(ISOLATION_PREFIX):
        kind = name.removeprefix(ISOLATION_PREFIX)
        return f"{name} (isolation {kind}: no runplane executor gives it on this fleet yet)"
    return name


def _short_ref(ref: str) -> str:
    """An image reference with its digest cut to 12 hex digits (``x@sha256:0123456789ab…``)."""
    name, at, digest = ref.partition("@")
    algo, colon, hexa = digest.partition(":")
    if at and colon and len(hexa) > 12:
        return f"{name}@{algo}:{hexa[:12]}…"
    return ref


def _image_platforms(job: JobDemand) -> str:
    """``image x@sha256:… is for linux/arm64`` for each image that constrains the arch."""
    return "; ".join(
        f"image {_short_ref(i.ref)} is for {', '.join(i.platforms)}" for i in job.arch_images
    )


def _image_arch_need(job: JobDemand) -> str:
    archs = sorted(job.image_archs or ())
    wanted = " or ".join(archs) if archs else "none (no architecture has all of its images)"
    return f"arch {wanted} for its images ({_image_platforms(job)})"


def _capabilities_need(job: JobDemand) -> str:
    caps = sorted(job.requires.capabilities)
    return "capabilities " + " and ".join(_capability(c) for c in caps)


def _limits_need(job: JobDemand) -> str:
    named = " and ".join(
        f"limits.{n} ({LIMIT_CAPABILITIES[n]})" for n in sorted(job.requires.limits)
    )
    return (
        f"enforcing {named}: a node whose agent can (cgroups, bubblewrap), or one started "
        "with --best-effort-limits"
    )


def _gpu_free_busy(job: JobDemand) -> Phrase:
    return _has(f"fewer than {job.gpus} matching GPU" + ("" if job.gpus == 1 else "s") + " free")


# --- static, node level -------------------------------------------------------------------


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


def check_owner(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    """A node another org owns runs only that org's jobs and those of orgs it granted."""
    owner = node.owner
    if owner is None or job.org_id is None or owner == job.org_id:
        return None
    if job.org_id in node.grantees:
        return None
    return Rejection(OWNER, f"node {node.id} belongs to another org")


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


def check_image_arch(node: NodeShape, load: NodeLoad, job: JobDemand) -> Rejection | None:
    """Every image the job runs in (its own, its pod services') must exist for the node's
    architecture; an image whose platforms are unknown constrains nothing."""
    allowed = job.image_archs
    if allowed is not None and node.arch not in allowed:
        return Rejection(IMAGE_ARCH, f"{_image_platforms(job)}; node {node.id} is {node.arch}")
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


# --- the registry ---------------------------------------------------------------------------

_GPU_NODES: dict[str, Phrase] = {
    NO_GPU: ("has no GPU", "have no GPU"),
    GPU_COUNT: ("has fewer GPUs", "have fewer GPUs"),
    GPU_VENDOR: ("has GPUs of another vendor", "have GPUs of another vendor"),
    CUDA_VERSION: ("has an older CUDA", "have an older CUDA"),
    GPU_VRAM: ("has smaller GPUs", "have smaller GPUs"),
}

#: Every filter, declared once, in evaluation order (see the module doc for the layout
#: the index relies on).
FILTERS: tuple[Filter, ...] = (
    Filter(
        "disabled",
        "node",
        check_disabled,
        (Reason(DISABLED, ("is disabled", "are disabled"), lambda job: "an enabled node"),),
    ),
    Filter(
        "owner",
        "class",
        check_owner,
        (
            Reason(
                OWNER,
                ("belongs to another org", "belong to another org"),
                lambda job: "a node of your org or granted to it",
            ),
        ),
    ),
    Filter(
        "trust",
        "class",
        check_trust,
        (
            Reason(
                TRUST_TIER,
                ("is of a lower tier", "are of a lower tier"),
                lambda job: f"trust tier {job.requires.min_tier.label} or higher",
            ),
        ),
    ),
    Filter(
        "arch",
        "class",
        check_arch,
        (
            Reason(
                ARCH,
                ("has another arch", "have another arch"),
                lambda job: "arch " + " or ".join(job.requires.arch),
            ),
        ),
    ),
    Filter(
        "capabilities",
        "class",
        check_capabilities,
        (Reason(CAPABILITY, ("lacks them", "lack them"), _capabilities_need),),
    ),
    Filter(
        "image_arch",
        "class",
        check_image_arch,
        (Reason(IMAGE_ARCH, ("has another arch", "have another arch"), _image_arch_need),),
    ),
    Filter(
        "limits",
        "class",
        check_limits,
        (Reason(LIMITS, ("cannot enforce them", "cannot enforce them"), _limits_need),),
    ),
    Filter(
        "gpu",
        "class",
        check_gpu,
        tuple(Reason(code, nodes, gpu_phrase) for code, nodes in _GPU_NODES.items()),
    ),
    Filter(
        "cpu",
        "node",
        check_cpu,
        (
            Reason(
                CPU,
                ("has fewer CPU cores", "have fewer CPU cores"),
                lambda job: f"{job.cpu_min:g} CPU cores",
            ),
        ),
        fits=lambda e, job: e.node.cpu_cores >= job.cpu_min,
    ),
    Filter(
        "ram",
        "node",
        check_ram,
        (Reason(RAM, ("has less RAM", "have less RAM"), lambda job: f"{job.ram_min:g} GB RAM"),),
        fits=lambda e, job: e.node.ram_gb >= job.ram_min,
    ),
    Filter(
        "disk",
        "node",
        check_disk,
        (
            Reason(
                DISK, ("has less disk", "have less disk"), lambda job: f"{job.disk_min:g} GB disk"
            ),
        ),
        fits=lambda e, job: e.node.disk_gb >= job.disk_min,
    ),
    Filter(
        "slots",
        "node",
        check_slots,
        (Reason(NO_SLOTS, ("accepts no jobs", "accept no jobs"), lambda job: "a job slot"),),
    ),
    Filter(
        "slots_free",
        "load",
        check_slots_free,
        (Reason(SLOTS_FULL, busy=lambda job: _has("no free job slot")),),
    ),
    Filter("gpu_free", "load", check_gpu_free, (Reason(GPU_FREE, busy=_gpu_free_busy),)),
    Filter(
        "cpu_free",
        "load",
        check_cpu_free,
        (Reason(CPU_FREE, busy=lambda job: _has(f"less than {job.cpu:g} CPU cores free")),),
        fits=lambda e, job: e.free_cpu >= job.cpu,
    ),
    Filter(
        "ram_free",
        "load",
        check_ram_free,
        (Reason(RAM_FREE, busy=lambda job: _has(f"less than {job.ram:g} GB RAM free")),),
        fits=lambda e, job: e.free_ram >= job.ram,
    ),
    Filter(
        "other_org",
        "load",
        check_other_org,
        (
            Reason(
                OTHER_ORG,
                busy=lambda job: (
                    "runs another org's jobs (one org at a time: its jobs share one uid)",
                    "run another org's jobs (one org at a time: its jobs share one uid)",
                ),
            ),
        ),
        fits=lambda e, job: not (e.node.one_org and e.load.runs_other_org(job.org_id)),
    ),
)

# Derived from FILTERS: every list below follows it.
CLASS_FILTERS: tuple[Filter, ...] = tuple(f for f in FILTERS if f.level == "class")
NODE_FILTERS: tuple[Filter, ...] = tuple(f for f in FILTERS if f.level == "node")
STATIC_FILTERS: tuple[Filter, ...] = tuple(f for f in FILTERS if f.static)
MOMENTARY_FILTERS: tuple[Filter, ...] = tuple(f for f in FILTERS if not f.static)
#: Every reason, in filter order, and each reason's declaration.
REASON_OF: dict[str, Reason] = {r.code: r for f in FILTERS for r in f.reasons}
REASONS: tuple[str, ...] = tuple(REASON_OF)
MOMENTARY_REASONS: frozenset[str] = frozenset(r.code for f in MOMENTARY_FILTERS for r in f.reasons)
STATIC_REASONS: frozenset[str] = frozenset(REASONS) - MOMENTARY_REASONS
#: The momentary fit filters with their reason (a wait reason's busy breakdown).
MOMENTARY_FITS: tuple[tuple[str, Fits], ...] = tuple(
    (f.reasons[0].code, f.fits) for f in MOMENTARY_FILTERS if f.fits is not None
)


def fits_all(e: Candidate, job: JobDemand) -> bool:
    """Every fit filter's ``fits``, and-ed and written out: what the index runs on each
    node a stream visits (about 90 times a decision; a call per filter there would cost a
    tenth of it). A new fit filter adds its condition here too:
    ``test_placement_filters.py`` holds this to the declarations."""
    node = e.node
    return (
        e.free_cpu >= job.cpu
        and e.free_ram >= job.ram
        and node.cpu_cores >= job.cpu_min
        and node.ram_gb >= job.ram_min
        and node.disk_gb >= job.disk_min
        and not (node.one_org and e.load.runs_other_org(job.org_id))
    )


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
