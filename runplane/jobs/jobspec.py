"""The resolved job spec, typed: :class:`JobSpec` is what a submit produces, what the
``jobs.spec`` column keeps and what demand, run orders, views and hashes read.

Its parts are the submit body's validated models (``Mount``, ``OutputSpecBody``,
``LimitsBody``, ``RequiresBody``, ``RetryBody``, defined here and re-exported by
``runplane/jobs/spec.py``) and the stored-only ones (:class:`StoredMount`, a session pod's
:class:`PodService`). A spec writes back exactly the keys it was read or built with
(:meth:`JobSpec.stored`: ``exclude_unset``), in the canonical JSON of :func:`canonical_json`,
so a row written before this type re-serializes byte for byte and its ``spec_hash`` is
unchanged (``tests/jobs/test_jobspec_compat.py``). Keys a spec may lack: ``retry`` (no
policy), ``pod`` (not a session's pod), ``env_sealed`` (nothing sealed), a mount's ``rev``
and ``commit`` (no git connection); an older row may lack more, and they stay absent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    field_validator,
    model_validator,
)

from runplane import sealed_env, vault
from runplane.sealing import Sealer

#: Where a mount path is rooted inside the job: `/work/x` is `x` in the job's directory.
WORK_ROOT = "/work"

#: Fields of the resolved spec that ``spec_hash`` covers (the spec's list, in its order).
HASHED_FIELDS = (
    "stack",
    "image",
    "command",
    "env",
    "config",
    "workspace",
    "inputs",
    "limits",
    "seed",
    "requires",
)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


NonNeg = Annotated[int, Field(ge=0)]
Name = Annotated[str, StringConstraints(min_length=1, max_length=256)]


MAX_MOUNT_PATH = 1024
MAX_REF = 8192


def _check_relative(value: str, what: str) -> str:
    """Refuse what could escape the job's directory or confuse a filesystem."""
    if len(value) > MAX_MOUNT_PATH:
        raise ValueError(f"{what} is longer than {MAX_MOUNT_PATH} characters")
    if "\\" in value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        raise ValueError(f"{what} must not contain a backslash or control characters")
    if ".." in value.split("/"):
        raise ValueError(f"{what} must not contain a '..' segment")
    return value


def _is_http(ref: str) -> bool:
    return ref.startswith(("http://", "https://")) and len(ref) > len("https://")


def _is_node_path(ref: str) -> bool:
    return ref.startswith(("/", "file://"))


class Mount(_Strict):
    path: str = WORK_ROOT
    ref: str = ""
    type: Literal["git", "archive", "file", "dir", "inline"] = "inline"
    mode: Literal["ro", "rw"] = "rw"
    #: a git connection of the org (docs/git.md): ``ref`` is then a branch, tag or commit
    #: of its repository (empty: the connection's default_ref, else HEAD)
    connection_id: str | None = Field(None, min_length=1, max_length=64)

    @field_validator("path")
    @classmethod
    def _path(cls, value: str) -> str:
        return _check_relative(value, "mount path")

    @model_validator(mode="after")
    def _ref(self) -> Mount:
        ref = self.ref
        if self.type != "inline" and len(ref) > MAX_REF:
            raise ValueError(f"ref is longer than {MAX_REF} characters")
        if self.connection_id is not None:
            if self.type != "git":
                raise ValueError("connection_id names a git connection: the type is git")
            if ref.startswith("-") or any(c.isspace() for c in ref) or "#" in ref:
                raise ValueError("with connection_id, ref is a branch, tag or commit")
        elif self.type == "git":
            url, _, rev = ref.partition("#")
            if (
                not url
                or url.startswith("-")
                or rev.startswith("-")
                or any(c.isspace() for c in ref)
            ):
                raise ValueError("a git ref is '<repository url>[#<branch, tag or commit>]'")
        elif self.type == "archive" and not _is_http(ref):
            raise ValueError("an archive ref is the http(s) URL of a .zip or .tar.gz")
        elif self.type == "file" and not (_is_http(ref) or _is_node_path(ref)):
            raise ValueError("a file ref is an http(s) URL or a path on the node")
        elif self.type == "dir" and ref and not (_is_http(ref) or _is_node_path(ref)):
            raise ValueError("a dir ref is empty, an archive's http(s) URL or a path on the node")
        return self


class OutputSpecBody(_Strict):
    artifact: Name
    glob: Name
    optional: bool = False

    @field_validator("glob")
    @classmethod
    def _glob(cls, value: str) -> str:
        _check_relative(value, "output glob")
        if value.startswith("/") and not value.startswith(WORK_ROOT + "/"):
            raise ValueError(f"an output glob is relative to the job's directory ({WORK_ROOT})")
        return value


class LimitsBody(_Strict):
    cpu_cores: NonNeg | None = None
    ram_gb: NonNeg | None = None
    gpu_count: NonNeg | None = None
    pids: NonNeg | None = None
    timeout_sec: NonNeg | None = None
    no_internet: bool = False
    egress_allow: list[str] = Field(default_factory=list)


class GpuRequires(_Strict):
    required: bool = False
    min_vram_gb: NonNeg = 0
    vendor: str = ""
    cuda_min: str = ""


class CpuRequires(_Strict):
    min_cores: NonNeg = 0


class RamRequires(_Strict):
    min_gb: NonNeg = 0


class DiskRequires(_Strict):
    min_gb: NonNeg = 0


class TrustRequires(_Strict):
    min_tier: Literal["community", "partner", "trusted"] = "community"


class RequiresBody(_Strict):
    gpu: GpuRequires = Field(default_factory=GpuRequires)
    cpu: CpuRequires = Field(default_factory=CpuRequires)
    ram: RamRequires = Field(default_factory=RamRequires)
    disk: DiskRequires = Field(default_factory=DiskRequires)
    arch: list[str] = Field(default_factory=list)
    trust: TrustRequires = Field(default_factory=TrustRequires)
    capabilities: list[str] = Field(default_factory=list)


#: Most retries a policy may ask for, and the longest backoff one retry may wait.
MAX_RETRIES = 10
MAX_BACKOFF_SEC = 24 * 3600


class RetryBody(_Strict):
    """A retry policy (an addition to the spec, docs/jobs.md "Retries"): a try that ends
    in a phase listed in ``on`` runs again, up to ``limit`` times, after
    ``backoff_sec * backoff_factor ** (retries so far)`` seconds (capped at a day)."""

    limit: int = Field(3, ge=0, le=MAX_RETRIES)
    on: list[Literal["failed", "timeout"]] = Field(["failed"], min_length=1)
    backoff_sec: int = Field(10, ge=0, le=MAX_BACKOFF_SEC)
    backoff_factor: float = Field(2.0, ge=1.0, le=10.0)

    def delay_sec(self, retries_done: int) -> float:
        """The backoff before retry number ``retries_done + 1``."""
        return float(min(MAX_BACKOFF_SEC, self.backoff_sec * self.backoff_factor**retries_done))


class _Stored(BaseModel):
    """A stored part: frozen; unknown keys of an older row are kept (and written back)."""

    model_config = ConfigDict(frozen=True, extra="allow")


class StoredMount(_Stored):
    """A mount as stored: the body's :class:`Mount` (checked at submit) and, for one that
    names a git connection, what its ref resolved to (``ref`` is then
    ``<repo_url>#<commit>``, ``rev`` what was asked, ``commit`` the answer)."""

    path: str = WORK_ROOT
    ref: str = ""
    type: Literal["git", "archive", "file", "dir", "inline"] = "inline"
    mode: Literal["ro", "rw"] = "rw"
    connection_id: str | None = None
    rev: str | None = None
    commit: str | None = None


class PodHealth(_Stored):
    """A pod service's health gate (``runplane/sessions/body.py`` ``PodHealth``)."""

    command: list[str]
    period_sec: int = 2
    timeout_sec: int = 5
    retries: int = 30


class ContainerImage(_Stored):
    """An image resolved at submit (docs/containers.md): what was asked, the manifest
    digest it resolved to (``<name>@sha256:<hex>``: the spec's ``image``, what
    ``spec_hash`` covers and what a rerun runs) and the platforms it exists for
    (``os/arch[/variant]``: placement's architecture filter). A job or pod service whose
    image is resolved runs only on a node that runs images (``executor-container``)."""

    asked: str
    ref: str
    platforms: list[str] = Field(default_factory=list)
    #: where the image came from: the job's ``image`` (or a pod service's), or its stack's
    #: (``RUNPLANE_STACK_IMAGES=resolve``)
    source: Literal["job", "stack"] = "job"


class PodService(_Stored):
    """One service of a session's pod as it runs (docs/sessions.md)."""

    name: str
    command: list[str]
    env: dict[str, str] = Field(default_factory=dict)
    needs: list[str] = Field(default_factory=list)
    health: PodHealth | None = None
    #: its sealed secret-looking env values (``runplane/sealed_env.py``)
    env_sealed: dict[str, str] | None = None
    #: the image it runs in, resolved at submit (its ``image``, else its stack's); absent
    #: when it runs on the node's host filesystem
    container: ContainerImage | None = None


class JobSpec(_Stored):
    """What a job runs with, fixed at admission (secrets included: views redact)."""

    stack: str = ""
    image: str = ""
    command: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    workspace: StoredMount | None = None
    inputs: list[StoredMount] = Field(default_factory=list)
    outputs: list[OutputSpecBody] = Field(default_factory=list)
    limits: LimitsBody = Field(default_factory=LimitsBody)
    seed: int = 0
    requires: RequiresBody = Field(default_factory=RequiresBody)
    mode: Literal["run", "session"] = "run"
    weights: dict[str, float] = Field(default_factory=dict)
    weights_preset: str | None = None
    isolation: Literal["none", "gvisor", "kata"] = "none"
    #: its retry policy (docs/jobs.md "Retries"; not hashed); absent without one
    retry: RetryBody | None = None
    #: whether it may be preempted and its grace (seconds), fixed at admission
    #: (docs/placement.md "Preemption"; not hashed); absent in rows from before
    preemptible: bool | None = None
    preempt_grace_sec: int | None = None
    #: a gang's ranks (2..64: docs/jobs.md "Multi-node jobs"); absent for a plain job
    nodes: int | None = None
    #: a session's pod, its services in start order; absent for other jobs
    pod: list[PodService] | None = None
    #: its sealed secret-looking env values; absent when none
    env_sealed: dict[str, str] | None = None
    #: the image it runs in, resolved at submit; absent for a job that runs on the node's
    #: host filesystem (its ``image`` is then the stack's as declared)
    container: ContainerImage | None = None

    @classmethod
    def load(cls, value: JobSpec | str | bytes | Mapping[str, Any]) -> JobSpec:
        """A spec from the store's text (or a decoded mapping; a spec is taken as is)."""
        if isinstance(value, JobSpec):
            return value
        if isinstance(value, str | bytes):
            return cls.model_validate_json(value)
        return cls.model_validate(value)

    def stored(self) -> dict[str, Any]:
        """The JSON-ready mapping the store keeps: the keys it was read or built with."""
        return self.model_dump(mode="json", exclude_unset=True)

    def stored_json(self) -> str:
        """The ``jobs.spec`` column's text (canonical JSON of :meth:`stored`)."""
        return canonical_json(self.stored())

    def mounts(self) -> list[StoredMount]:
        """Its workspace (when it has one) and inputs."""
        return [*([self.workspace] if self.workspace else []), *self.inputs]

    def connection_ids(self) -> set[str]:
        """The git connections its mounts clone with."""
        return {m.connection_id for m in self.mounts() if m.connection_id}

    def with_limits(self, limits: Mapping[str, Any]) -> JobSpec:
        """A copy whose limits are its own updated with ``limits`` (admission's clamp)."""
        merged = {**self.limits.model_dump(exclude_unset=True), **limits}
        return self.model_copy(update={"limits": LimitsBody.model_validate(merged)})

    def with_preemption(self, preemptible: bool, grace_sec: int) -> JobSpec:
        """A copy with its preemption fixed (admission: the policy's default and cap)."""
        if (self.preemptible, self.preempt_grace_sec) == (preemptible, grace_sec):
            return self
        return self.model_copy(update={"preemptible": preemptible, "preempt_grace_sec": grace_sec})

    def containers(self) -> list[ContainerImage]:
        """The images it runs in: its own and its pod services' (empty: a host job)."""
        found = [self.container] if self.container else []
        return found + [s.container for s in self.pod or () if s.container]

    def has_sealed(self) -> bool:
        """Whether it holds sealed env values (its own or a pod service's)."""
        return bool(self.env_sealed) or any(s.env_sealed for s in self.pod or ())

    def secret_references(self) -> dict[str, list[str]]:
        """Where it references org secrets: ``env.VAR`` and, for a session's pod,
        ``pod.<service>.env.VAR`` -> the secret names."""
        return vault.references_in(self.env, ((s.name, s.env) for s in self.pod or ()))


#: ``json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)``, its
#: encoder made once (``json.dumps`` with arguments makes one per call)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def canonical_json(value: Any) -> str:
    return _CANONICAL.encode(value)


def spec_hash(spec: JobSpec) -> str:
    """Lowercase hex SHA-256 of the canonical JSON of the hashed fields (a session's pod
    and a gang's ``nodes`` too: only those specs have them, other hashes are unchanged)."""
    return hashlib.sha256(canonical_json(hashed_subset(spec)).encode()).hexdigest()


def hashed_subset(spec: JobSpec) -> dict[str, Any]:
    """What ``spec_hash`` hashes (the canonical JSON of this mapping)."""
    stored = spec.stored()
    subset = {name: stored.get(name) for name in HASHED_FIELDS}
    if spec.pod:
        subset["pod"] = stored["pod"]
    if spec.nodes:  # a gang runs another thing than its single twin
        subset["nodes"] = spec.nodes
    return subset


def sealed(spec: JobSpec, sealer: Callable[[], Sealer], org_id: str) -> JobSpec:
    """``spec`` as stored: its secret-looking plain env values sealed
    (``sealed_env.sealed_doc``); itself when it has none."""
    if not spec.env and not spec.pod:  # nothing to seal (``wants_sealing`` reads these)
        return spec
    stored = spec.stored()
    if not sealed_env.wants_sealing(stored):
        return spec
    return JobSpec.model_validate(sealed_env.sealed_doc(stored, sealer, org_id))


def opened(spec: JobSpec, sealer: Callable[[], Sealer], org_id: str) -> tuple[JobSpec, list[str]]:
    """``spec`` with its sealed env values put back, and those values (for the agent to
    mask); itself when nothing is sealed."""
    if not spec.has_sealed():
        return spec, []
    plain, values = sealed_env.opened_doc(spec.stored(), sealer, org_id)
    return JobSpec.model_validate(plain), values
