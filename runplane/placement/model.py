"""Placement inputs: node shapes, node loads and job demands (frozen, validated, pure).

Shapes and demands normalise what they are given (vendors and architectures lower-cased,
``amd64``/``aarch64`` folded into ``x86_64``/``arm64``, GPUs sorted, CUDA versions parsed)
and precompute what the filters and scorers read on every decision, so the hot path does
no parsing. A job's *reservation* (what it takes from a node's free capacity) and its
*machine requirement* (what the node must have at all) are kept apart:

* reservation: ``limits`` when given, else ``max(DEFAULT, requires.min)`` (1 CPU core,
  2 GB RAM, no GPU; one GPU when ``requires.gpu.required`` and no ``gpu_count``);
* requirement: ``max(requires.min, reservation)`` per dimension.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from typing import Any

from .weights import IMAGE_CACHED, WEIGHT_NAMES, DemandProblem, resolve_weights, weight_problems

#: CPU cores a job reserves when its limits give none (and its stack asks for no more).
DEFAULT_CPU_CORES = 1.0
#: RAM (GB) a job reserves when its limits give none (and its stack asks for no more).
DEFAULT_RAM_GB = 2.0

_ARCH_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "aarch64": "arm64", "armv8": "arm64"}
_VERSION = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")

CreatedAt = datetime | float | int | str
"""Anything sortable; one queue must use one kind (all datetimes, all numbers...)."""


class Tier(IntEnum):
    """Node trust tiers, ordered: community < partner < trusted."""

    COMMUNITY = 0
    PARTNER = 1
    TRUSTED = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, value: Tier | str | int) -> Tier:
        if isinstance(value, Tier):
            return value
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                valid = ", ".join(t.label for t in cls)
                raise ValueError(f"unknown tier {value!r}; valid: {valid}") from None
        return cls(value)


def cuda_version(text: str | None) -> tuple[int, ...] | None:
    """Parse a CUDA version for numeric comparison: ``"12.10"`` -> ``(12, 10)``.

    Trailing zero components are dropped so ``"12"`` == ``"12.0"``; a missing or
    unparseable version (an AMD card, ``"n/a"``) is ``None``, which meets no minimum.
    """
    if not text:
        return None
    match = _VERSION.match(text)
    if match is None:
        return None
    parts = [int(p) for p in match.group(1).split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def cuda_at_least(have: str | None, want: str | None) -> bool:
    """True when CUDA version ``have`` is at least ``want`` (no ``want`` is always true)."""
    need = cuda_version(want)
    if need is None:
        return True
    got = cuda_version(have)
    return got is not None and got >= need


def normalize_arch(arch: str) -> str:
    low = arch.strip().lower()
    return _ARCH_ALIASES.get(low, low)


def platform_arch(platform: str) -> str | None:
    """The architecture of an image platform (``os/arch[/variant]``), normalised:
    ``linux/amd64`` -> ``x86_64``, ``linux/arm64/v8`` -> ``arm64``; ``None`` for one that
    names none, or ``unknown`` (the attestation manifests of an OCI index)."""
    parts = platform.strip().split("/")
    arch = normalize_arch(parts[1]) if len(parts) > 1 else ""
    return arch if arch and arch != "unknown" else None


def image_digest(ref: str) -> str:
    """The digest of a resolved reference (``name@sha256:<hex>`` -> ``sha256:<hex>``: what a
    node's image cache reports); ``""`` for a reference without one."""
    _, at, digest = ref.rpartition("@")
    return digest if at else ""


@dataclass(frozen=True, slots=True)
class ImageDemand:
    """An image the job (or one of its pod services) runs in: its resolved reference
    (``name@sha256:<hex>``) and the platforms it exists for (``os/arch[/variant]``; empty:
    unknown, no node is refused for it). ``archs``: the platforms' architectures,
    normalised (derived)."""

    ref: str
    platforms: tuple[str, ...] = ()
    archs: frozenset[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "platforms", tuple(self.platforms))
        archs = {a for p in self.platforms if (a := platform_arch(p)) is not None}
        object.__setattr__(self, "archs", frozenset(archs))

    @property
    def digest(self) -> str:
        return image_digest(self.ref)


def _finite(name: str, value: float, *, minimum: float = 0.0) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number, got {value!r}")
    if not math.isfinite(value) or value < minimum:
        raise ValueError(f"{name} must be a finite number >= {minimum:g}, got {value!r}")


def _count(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


class DemandError(ValueError):
    """A job's placement inputs are invalid; ``problems`` lists each (RunProblem-shaped)."""

    def __init__(self, problems: list[DemandProblem]) -> None:
        self.problems = problems
        super().__init__("; ".join(p.message for p in problems))


@dataclass(frozen=True, slots=True, order=True)
class Gpu:
    """One GPU of a node. ``vendor`` is lower-cased; ``cuda`` may be empty (non-NVIDIA)."""

    model: str
    vendor: str = "nvidia"
    vram_gb: float = 0.0
    cuda: str = ""

    def __post_init__(self) -> None:
        _finite("gpu vram_gb", self.vram_gb)
        object.__setattr__(self, "vendor", self.vendor.strip().lower())


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What a node *is*: its static capacity and attributes (changes only on re-register)."""

    id: str
    tier: Tier = Tier.COMMUNITY
    disabled: bool = False
    cpu_cores: float = 0.0
    ram_gb: float = 0.0
    disk_gb: float = 0.0
    gpus: tuple[Gpu, ...] = ()
    arch: str = "x86_64"
    os: str = "linux"
    capabilities: frozenset[str] = field(default_factory=frozenset)
    max_concurrency: int = 1
    dlperf: float = 0.0
    reliability: float = 1.0
    #: the org that owns the node (enrolled with that org's join token); None: universal
    owner: str | None = None
    #: orgs the owner granted the node to (they place jobs on it as if they owned it)
    grantees: frozenset[str] = field(default_factory=frozenset)
    #: the image digests (``sha256:<hex>``) its image cache holds: the ``image_cached``
    #: scorer reads them; neither a class attribute nor a static one (a pull changes them)
    images: frozenset[str] = field(default_factory=frozenset)
    # Derived (set in __post_init__): (vendor, vram_gb, parsed cuda) per GPU.
    gpu_specs: tuple[tuple[str, float, tuple[int, ...] | None], ...] = field(
        init=False, repr=False, compare=False
    )
    #: Derived: its jobs share one uid and its operator did not allow several orgs at
    #: once (neither :data:`UID_PER_JOB` nor :data:`SHARED_UID_OK`): one org at a time.
    one_org: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.id:
            raise ValueError("node id must not be empty")
        object.__setattr__(self, "tier", Tier.parse(self.tier))
        for name in ("cpu_cores", "ram_gb", "disk_gb", "dlperf", "reliability"):
            _finite(name, getattr(self, name))
        _count("max_concurrency", self.max_concurrency)
        gpus = tuple(sorted(self.gpus))
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "arch", normalize_arch(self.arch))
        object.__setattr__(self, "os", self.os.strip().lower())
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))
        object.__setattr__(self, "grantees", frozenset(self.grantees))
        object.__setattr__(self, "images", frozenset(self.images))
        object.__setattr__(
            self, "gpu_specs", tuple((g.vendor, g.vram_gb, cuda_version(g.cuda)) for g in gpus)
        )
        object.__setattr__(self, "one_org", not (self.capabilities & UID_CAPABILITIES))

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def class_key(self) -> tuple[object, ...]:
        """The attributes the class-level filters read; equal keys filter identically."""
        return (self.tier, self.arch, self.capabilities, self.gpus, self.owner, self.grantees)

    @classmethod
    def from_view(cls, view: Mapping[str, Any]) -> NodeShape:
        """Build from the API's Node view (``gpu_models``, ``tier``...); extra keys ignored.

        ``disk_gb``, ``capabilities`` and ``images.digests`` are read when present (the
        agent reports them).
        """
        gpus = tuple(
            Gpu(
                model=str(g.get("model", "")),
                vendor=str(g.get("vendor", "") or "nvidia"),
                vram_gb=float(g.get("vram_gb", 0) or 0),
                cuda=str(g.get("cuda", "") or ""),
            )
            for g in view.get("gpu_models") or ()
        )
        return cls(
            id=str(view["id"]),
            tier=Tier.parse(view.get("tier") or "community"),
            disabled=bool(view.get("disabled", False)),
            cpu_cores=float(view.get("cpu_cores", 0) or 0),
            ram_gb=float(view.get("ram_gb", 0) or 0),
            disk_gb=float(view.get("disk_gb", 0) or 0),
            gpus=gpus,
            arch=str(view.get("arch") or "x86_64"),
            os=str(view.get("os") or "linux"),
            capabilities=frozenset(str(c) for c in view.get("capabilities") or ()),
            max_concurrency=int(view.get("max_concurrency", 1) or 0),
            dlperf=float(view.get("dlperf", 0) or 0),
            reliability=float(1 if view.get("reliability") is None else view["reliability"]),
            images=frozenset(str(d) for d in (view.get("images") or {}).get("digests") or ()),
        )


@dataclass(frozen=True, slots=True)
class NodeLoad:
    """What a node is *doing*: committed load (changes with every placement and finish)."""

    used_cpu: float = 0.0
    used_ram: float = 0.0
    used_gpu: int = 0
    active_jobs: int = 0
    #: (org id, jobs) of the orgs whose jobs hold the load, sorted (jobs of no org, as
    #: in unit tests, are not counted)
    orgs: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        _finite("used_cpu", self.used_cpu)
        _finite("used_ram", self.used_ram)
        _count("used_gpu", self.used_gpu)
        _count("active_jobs", self.active_jobs)

    def plus(
        self, cpu: float, ram: float, gpus: int, jobs: int = 1, org: str | None = None
    ) -> NodeLoad:
        """This load with a job's reservation added (negative values release it, floored at
        0); ``org``: the job's org, counted in :attr:`orgs`."""
        orgs = self.orgs
        if jobs and org is not None:
            counts = dict(orgs)
            left = counts.get(org, 0) + jobs
            if left > 0:
                counts[org] = left
            else:
                counts.pop(org, None)
            orgs = tuple(sorted(counts.items()))
        return NodeLoad(
            used_cpu=max(0.0, self.used_cpu + cpu),
            used_ram=max(0.0, self.used_ram + ram),
            used_gpu=max(0, self.used_gpu + gpus),
            active_jobs=max(0, self.active_jobs + jobs),
            orgs=orgs,
        )

    def runs_other_org(self, org: str | None) -> bool:
        """Whether jobs of an org other than ``org`` hold some of the load (the index asks
        it of every node a walk visits: no generator for the common none or one org)."""
        orgs = self.orgs
        if org is None or not orgs:
            return False
        if len(orgs) == 1:
            return orgs[0][0] != org
        return any(other != org for other, _ in orgs)

    @classmethod
    def from_view(cls, view: Mapping[str, Any]) -> NodeLoad:
        return cls(
            used_cpu=float(view.get("used_cpu", 0) or 0),
            used_ram=float(view.get("used_ram", 0) or 0),
            used_gpu=int(view.get("used_gpu", 0) or 0),
            active_jobs=int(view.get("active_jobs", 0) or 0),
        )


@dataclass(frozen=True, slots=True)
class GpuRequirement:
    """``requires.gpu``: any field other than ``required`` applies only when GPUs are needed."""

    required: bool = False
    min_vram_gb: float = 0.0
    vendor: str = ""
    cuda_min: str = ""

    def __post_init__(self) -> None:
        _finite("requires.gpu.min_vram_gb", self.min_vram_gb)
        object.__setattr__(self, "vendor", self.vendor.strip().lower())
        if self.cuda_min and cuda_version(self.cuda_min) is None:
            raise DemandError(
                [
                    DemandProblem(
                        "requires.gpu.cuda_min",
                        "bad_value",
                        f"requires.gpu.cuda_min {self.cuda_min!r} is not a version like '12.1'",
                    )
                ]
            )


@dataclass(frozen=True, slots=True)
class Requires:
    """The job's ``requires``: machine properties a node must have (never reserved)."""

    gpu: GpuRequirement = field(default_factory=GpuRequirement)
    min_cores: float = 0.0
    min_ram_gb: float = 0.0
    min_disk_gb: float = 0.0
    arch: tuple[str, ...] = ()
    min_tier: Tier = Tier.COMMUNITY
    capabilities: frozenset[str] = field(default_factory=frozenset)
    #: the job's ``limits`` a node must enforce (``ram_gb``, ``pids``, ...; see
    #: :data:`LIMIT_CAPABILITIES`)
    limits: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        _finite("requires.cpu.min_cores", self.min_cores)
        _finite("requires.ram.min_gb", self.min_ram_gb)
        _finite("requires.disk.min_gb", self.min_disk_gb)
        object.__setattr__(
            self, "arch", tuple(sorted({normalize_arch(a) for a in self.arch if a.strip()}))
        )
        object.__setattr__(self, "min_tier", Tier.parse(self.min_tier))
        object.__setattr__(self, "capabilities", frozenset(self.capabilities))
        unknown = set(self.limits) - set(LIMIT_CAPABILITIES)
        if unknown:
            raise ValueError(f"not an enforceable limit: {', '.join(sorted(unknown))}")
        object.__setattr__(self, "limits", frozenset(self.limits))


@dataclass(frozen=True, slots=True)
class JobDemand:
    """Everything placement needs to know about one queued job.

    ``cpu_cores``/``ram_gb``/``gpu_count`` are the job's ``limits`` (0 = not given).
    Derived fields (``cpu``, ``ram``, ``gpus``: the reservation; ``cpu_min``, ``ram_min``,
    ``disk_min``: the machine requirement; ``weight_table``) are computed on construction.
    Raises :class:`DemandError` for unknown weight names or presets and bad values.
    """

    job_id: str
    priority: int = 100
    created_at: CreatedAt = 0.0
    cpu_cores: float = 0.0
    ram_gb: float = 0.0
    gpu_count: int = 0
    requires: Requires = field(default_factory=Requires)
    weights: Mapping[str, float] = field(default_factory=dict)
    weights_preset: str | None = None
    #: the job's org: only nodes it owns, was granted, or universal ones run it (None:
    #: any node, for callers that check a shape only)
    org_id: str | None = None
    #: the images it runs in (its own and its pod services'; empty: a host job)
    images: tuple[ImageDemand, ...] = ()
    #: a running job of lower priority than a waiting one may be stopped for it
    #: (``preempt.py``), given ``preempt_grace_sec`` between SIGTERM and SIGKILL; neither
    #: is part of a signature (no filter reads them)
    preemptible: bool = False
    preempt_grace_sec: int = 0
    #: a gang's ranks (``gang.py``): each rank needs the limits above on a node of its own
    #: (1: a plain job; a gang's signature differs from its single twin's)
    nodes: int = 1
    # Derived.
    cpu: float = field(init=False, compare=False)
    ram: float = field(init=False, compare=False)
    gpus: int = field(init=False, compare=False)
    cpu_min: float = field(init=False, compare=False, repr=False)
    ram_min: float = field(init=False, compare=False, repr=False)
    disk_min: float = field(init=False, compare=False, repr=False)
    weight_table: Mapping[str, float] = field(init=False, compare=False, repr=False)
    active_weights: tuple[tuple[str, float], ...] = field(init=False, compare=False, repr=False)
    cuda_min_version: tuple[int, ...] | None = field(init=False, compare=False, repr=False)
    #: the digests of its images (what ``image_cached`` looks for in a node's cache)
    image_digests: frozenset[str] = field(init=False, compare=False, repr=False)
    #: the architectures every one of its images exists for (None: no image constrains it)
    image_archs: frozenset[str] | None = field(init=False, compare=False, repr=False)
    #: the images that constrain the architecture (their platforms are known)
    arch_images: tuple[ImageDemand, ...] = field(init=False, compare=False, repr=False)
    class_signature: tuple[object, ...] = field(init=False, compare=False, repr=False)
    static_signature: tuple[object, ...] = field(init=False, compare=False, repr=False)
    fit_signature: tuple[object, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        problems = weight_problems(self.weights, self.weights_preset)
        for key, value in (
            ("limits.cpu_cores", self.cpu_cores),
            ("limits.ram_gb", self.ram_gb),
        ):
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not (math.isfinite(value) and value >= 0)
            ):
                problems.append(DemandProblem(key, "out_of_range", f"{key} must be >= 0"))
        gpu_count = self.gpu_count
        if isinstance(gpu_count, bool) or not isinstance(gpu_count, int) or gpu_count < 0:
            problems.append(
                DemandProblem("limits.gpu_count", "out_of_range", "limits.gpu_count must be >= 0")
            )
        if problems:
            raise DemandError(problems)
        req = self.requires
        set_ = object.__setattr__
        set_(self, "weights", dict(self.weights))
        cpu = float(self.cpu_cores) or max(DEFAULT_CPU_CORES, req.min_cores)
        ram = float(self.ram_gb) or max(DEFAULT_RAM_GB, req.min_ram_gb)
        set_(self, "cpu", cpu)
        set_(self, "ram", ram)
        set_(self, "gpus", gpu_count or (1 if req.gpu.required else 0))
        set_(self, "cpu_min", max(req.min_cores, cpu))
        set_(self, "ram_min", max(req.min_ram_gb, ram))
        set_(self, "disk_min", float(req.min_disk_gb))
        image_sig = self._derive_images()
        # Signatures: jobs with equal signatures get equal verdicts from the filters that
        # read them (class-level ones; all static ones; static plus reservation).
        gpu = req.gpu
        cuda_min = cuda_version(gpu.cuda_min) if self.gpus else None
        set_(self, "cuda_min_version", cuda_min)
        gpu_sig: tuple[object, ...] = (
            (self.gpus, gpu.min_vram_gb, gpu.vendor, cuda_min) if self.gpus else (0,)
        )
        class_sig = (
            req.min_tier,
            req.arch,
            req.capabilities,
            req.limits,
            gpu_sig,
            image_sig,
            self.org_id,  # last: the index reads the signature without it
        )
        static_sig = (class_sig, self.cpu_min, self.ram_min, self.disk_min)
        set_(self, "class_signature", class_sig)
        set_(self, "static_signature", static_sig)
        fit_sig: tuple[object, ...] = (static_sig, cpu, ram, self.gpus)
        set_(self, "fit_signature", fit_sig if self.nodes == 1 else (*fit_sig, self.nodes))

    def _derive_images(self) -> tuple[object, ...]:
        """Set the weights and what the images decide (digests, architectures); returns
        the images' part of the class signature: the architectures and the refs of the
        images that constrain them (the wait reason names them)."""
        set_ = object.__setattr__
        table = resolve_weights(self.weights_preset, self.weights)
        set_(self, "weight_table", table)
        images = tuple(self.images)
        set_(self, "images", images)
        digests = frozenset(d for i in images if (d := i.digest))
        set_(self, "image_digests", digests)
        # image_cached weighs only for a job that has images (a host job's scores stay)
        set_(
            self,
            "active_weights",
            tuple((k, w) for k, w in table.items() if w > 0 and (digests or k != IMAGE_CACHED)),
        )
        arch_images = tuple(i for i in images if i.archs)
        set_(self, "arch_images", arch_images)
        archs = frozenset.intersection(*(i.archs for i in arch_images)) if arch_images else None
        set_(self, "image_archs", archs)
        return (archs, tuple(i.ref for i in arch_images)) if arch_images else ()

    @property
    def sort_key(self) -> tuple[int, CreatedAt, str]:
        """Queue order: higher priority first, then oldest, then job id."""
        return (-self.priority, self.created_at, self.job_id)

    def for_job(self, job_id: str, created_at: CreatedAt) -> JobDemand:
        """The same demand for another job (the jobs of an array share their spec's):
        a copy with its id and age, without deriving everything again."""
        twin = object.__new__(JobDemand)
        for name in JobDemand.__slots__:
            object.__setattr__(twin, name, getattr(self, name))
        object.__setattr__(twin, "job_id", job_id)
        object.__setattr__(twin, "created_at", created_at)
        return twin


#: The node capability ``isolation-<kind>`` says its executor gives isolation ``kind``.
ISOLATION_PREFIX = "isolation-"
#: The node runs jobs in their images (``runplane agent --executor container``): a job
#: whose spec names images (``JobSpec.containers()``) requires it.
EXECUTOR_CONTAINER = "executor-container"
#: The agent gives each attempt a uid of its own (a root agent; ``runplane/agent/uids.py``).
UID_PER_JOB = "uid-per-job"
#: Its jobs share one uid, but its operator lets several orgs' jobs run at once
#: (``runplane agent --shared-uid-ok``). A node with neither runs one org at a time.
SHARED_UID_OK = "shared-uid-ok"
UID_CAPABILITIES = frozenset({UID_PER_JOB, SHARED_UID_OK})

#: limit -> the node capability that says its agent enforces it (``runplane/agent/limits.py``
#: reports them). ``gpu_count`` and ``timeout_sec`` every agent enforces.
LIMIT_CAPABILITIES: Mapping[str, str] = {
    "ram_gb": "limit-ram",
    "cpu_cores": "limit-cpu",
    "pids": "limit-pids",
    "no_internet": "limit-no-internet",
    "egress_allow": "limit-egress",
}
#: A node with this capability runs jobs whose limits it cannot enforce (the job's log
#: says which): ``runplane agent --best-effort-limits``.
BEST_EFFORT_LIMITS = "limits-best-effort"


def enforced_limits(limits: Mapping[str, Any]) -> frozenset[str]:
    """The limits of a job's ``limits`` map a node must enforce (those given: non-zero,
    true or non-empty)."""
    return frozenset(name for name in LIMIT_CAPABILITIES if limits.get(name))


def missing_limits(node: NodeShape, job: JobDemand) -> list[str]:
    """The job's limits ``node`` cannot enforce (none under best effort), sorted."""
    wanted = job.requires.limits
    if not wanted or BEST_EFFORT_LIMITS in node.capabilities:
        return []
    return sorted(n for n in wanted if LIMIT_CAPABILITIES[n] not in node.capabilities)


def isolation_capability(isolation: str) -> str:
    """The node capability that says its executor gives ``isolation`` (gvisor, kata)."""
    return ISOLATION_PREFIX + isolation


__all__ = [
    "BEST_EFFORT_LIMITS",
    "DEFAULT_CPU_CORES",
    "DEFAULT_RAM_GB",
    "EXECUTOR_CONTAINER",
    "ISOLATION_PREFIX",
    "LIMIT_CAPABILITIES",
    "SHARED_UID_OK",
    "UID_CAPABILITIES",
    "UID_PER_JOB",
    "WEIGHT_NAMES",
    "CreatedAt",
    "DemandError",
    "DemandProblem",
    "Gpu",
    "GpuRequirement",
    "ImageDemand",
    "JobDemand",
    "NodeLoad",
    "NodeShape",
    "Requires",
    "Tier",
    "cuda_at_least",
    "cuda_version",
    "enforced_limits",
    "image_digest",
    "isolation_capability",
    "missing_limits",
    "normalize_arch",
    "platform_arch",
]
