"""The job submit body and its resolution into the immutable spec a job runs with.

``issues`` lists what keeps a body from running (unknown stack 400; unavailable stack, bad
mode, bad config, no command 422); ``build`` makes the spec of a body without issues (the
stack's defaults filled in, a seed derived from the body when it names none); ``finish``
applies the admitted limits and fingerprints the result: ``spec_hash`` covers what
determines the run, so equal hashes reproduce identically, and a rerun inherits it.
``resolve`` does all three without admission.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints, field_validator

from runplane.images import reference
from runplane.problems import FieldProblem, Problem
from runplane.stacks import Catalog, Stack, config_env, validate_config
from runplane.suggest import suggestion

from .jobspec import (
    WORK_ROOT,
    JobSpec,
    LimitsBody,
    Mount,
    Name,
    RequiresBody,
    RetryBody,
    _Strict,
    canonical_json,
    spec_hash,
)
from .jobspec import OutputSpecBody as OutputSpecBody  # re-exported: part of the body

SETUP_KEY = "RUNPLANE_SETUP"
DISPLAY_KEY = "RUNPLANE_DISPLAY"
INT64_MAX = 2**63 - 1
DEFAULT_INLINE_FILE = "main.py"


class SubmitJobBody(_Strict):
    """SubmitJobBody of the spec (only ``stack`` is mandatory), plus ``project`` and the
    ``retry`` policy (additions)."""

    stack: Name
    #: the image the job runs in, over its stack's: ``[registry[:port]/]name[:tag][@digest]``,
    #: resolved to a digest at submit (docs/containers.md); the job then runs only on a
    #: node that runs images
    image: Annotated[str, StringConstraints(max_length=reference.MAX_REFERENCE)] | None = None
    command: list[str] | None = None
    env: dict[str, str] = Field(default_factory=dict)
    config: dict[str, Any] = Field(default_factory=dict)
    workspace: Mount | None = None
    inputs: list[Mount] = Field(default_factory=list)
    outputs: list[OutputSpecBody] = Field(default_factory=list)
    requires: RequiresBody = Field(default_factory=RequiresBody)
    limits: LimitsBody = Field(default_factory=LimitsBody)
    weights: dict[str, float] = Field(default_factory=dict)
    weights_preset: Literal["training", "interactive", "batch"] | None = None
    isolation: Literal["none", "gvisor", "kata"] = "none"
    priority: int = Field(100, ge=-(2**31), le=2**31 - 1)
    #: (a job array's items are validated without it, the seed checked alone: see
    #: ``arrays.fast_batch`` before making it depend on another field)
    seed: int | None = Field(None, ge=0, le=INT64_MAX)
    mode: Literal["run", "session"] = "run"
    project: Annotated[str, StringConstraints(max_length=128)] = ""
    retry: RetryBody | None = None
    #: whether a job of higher priority may stop it to take its place (None: the policy's
    #: ``preemptible_default``), and the seconds it then has between SIGTERM and SIGKILL
    #: (None: RUNPLANE_PREEMPT_GRACE_SEC); docs/placement.md "Preemption"
    preemptible: bool | None = None
    preempt_grace_sec: int | None = Field(None, ge=1, le=86400)
    #: a gang of that many ranks, each on a node of its own with ``requires``/``limits``
    #: (docs/jobs.md "Multi-node jobs"); 1: a plain job
    nodes: int = Field(1, ge=1, le=64)

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        return reference.check(value)


@dataclass(frozen=True, slots=True)
class ResolvedJob:
    """What a job runs with, fixed at admission."""

    spec: JobSpec
    spec_hash: str
    priority: int
    project: str

    @property
    def stack(self) -> str:
        return self.spec.stack


def _merge_requires(body: RequiresBody, stack_requires: Any) -> dict[str, Any]:
    merged = body.model_dump()
    merged["gpu"]["required"] = bool(body.gpu.required or stack_requires.gpu.required)
    merged["gpu"]["min_vram_gb"] = max(body.gpu.min_vram_gb, stack_requires.gpu.min_vram_gb)
    merged["cpu"]["min_cores"] = max(body.cpu.min_cores, stack_requires.cpu.min_cores)
    merged["ram"]["min_gb"] = max(body.ram.min_gb, stack_requires.ram.min_gb)
    merged["arch"] = sorted(set(body.arch))
    merged["capabilities"] = sorted(set(body.capabilities))
    return merged


@dataclass(frozen=True, slots=True)
class Issue:
    """One reason a body cannot run: its HTTP status (400 or 422), the problem code of the
    answer, a sentence for ``detail`` and the RunProblem."""

    status: int
    code: str
    detail: str
    problem: FieldProblem


#: A catalog of at most this many stacks is listed whole when a stack name is unknown.
LIST_STACKS_UP_TO = 12


def unknown_stack(name: str, catalog: Catalog) -> tuple[str, str]:
    """``(detail, message)`` for an unknown stack name: the close name when there is one,
    and the catalog when it is short (else where to find it)."""
    names = catalog.names()
    hint = suggestion(name, names)
    message = f"no stack named {name!r}" + (f"; {hint}" if hint else "")
    if names and len(names) <= LIST_STACKS_UP_TO:
        where = f"known stacks: {', '.join(names)}"
    else:
        where = "GET /v1/stacks lists the catalog"
    return f"unknown stack {name!r}; " + (f"{hint} " if hint else "") + where, message


def stack_issues(name: str, catalog: Catalog) -> tuple[Stack | None, list[Issue]]:
    """The stack named ``name`` and what keeps it from running (unknown 400, unavailable 422)."""
    stack = catalog.get(name)
    if stack is None:
        detail, message = unknown_stack(name, catalog)
        problem = FieldProblem("stack", "unknown_stack", message)
        return None, [Issue(400, "unknown_stack", detail, problem)]
    if stack.unavailable:
        detail = f"stack {stack.name!r} is unavailable right now; pick another from GET /v1/stacks"
        problem = FieldProblem("stack", "stack_unavailable", f"stack {stack.name!r} is unavailable")
        return stack, [Issue(422, "stack_unavailable", detail, problem)]
    return stack, []


def issues(
    body: SubmitJobBody, catalog: Catalog, config: Mapping[str, Any] | None = None
) -> tuple[Stack | None, dict[str, Any], list[Issue]]:
    """Everything wrong with ``body`` (its ``config`` replaced by ``config`` when given):
    the stack, the resolved config (defaults filled) and the issues, in a stable order."""
    stack, found = stack_issues(body.stack, catalog)
    if stack is None:
        return None, {}, found
    if body.mode not in stack.modes:
        found.append(
            Issue(
                422,
                "invalid_mode",
                f"stack {stack.name!r} supports modes {', '.join(stack.modes)}, not {body.mode!r}",
                FieldProblem("mode", "not_allowed", f"mode must be one of {stack.modes}"),
            )
        )
    checked = validate_config(stack, body.config if config is None else config)
    for p in checked.problems:
        found.append(
            Issue(
                422, "invalid_config", p.message, FieldProblem(f"config.{p.key}", p.code, p.message)
            )
        )
    if not body.command and not stack.default_command:
        found.append(
            Issue(
                422,
                "missing_command",
                f"stack {stack.name!r} has no default command; send `command`",
                FieldProblem("command", "missing_field", "command is required for this stack"),
            )
        )
    return stack, checked.resolved, found


def raise_issues(found: list[Issue]) -> None:
    """Raise the Problem answering ``found`` (400 before 422; every RunProblem listed)."""
    if not found:
        return
    first = min(found, key=lambda issue: issue.status)
    if first.code == "invalid_config" and all(i.code == "invalid_config" for i in found):
        detail = "; ".join(i.detail for i in found)
    else:
        detail = first.detail
    raise Problem(first.status, first.code, detail, [i.problem for i in found])


def body_hash(body: SubmitJobBody) -> str:
    """Fingerprint of what was asked (whitespace and key order do not matter; the retry
    policy and the preemption fields are left out: they do not change what a try runs,
    nor its default seed; so are an ``image`` not given and ``nodes`` 1, so that the
    bodies of before images and gangs hash as they did)."""
    return hashlib.sha256(canonical_json(body_doc(body)).encode()).hexdigest()


def body_doc(body: SubmitJobBody) -> dict[str, Any]:
    """What ``body_hash`` hashes (the canonical JSON of this mapping)."""
    left_out = {"retry", *PREEMPTION_FIELDS}
    if body.image is None:
        left_out.add("image")
    if body.nodes == 1:
        left_out.add("nodes")
    return body.model_dump(mode="json", exclude=left_out)


#: The submit body's preemption fields (docs/placement.md "Preemption"): not hashed.
PREEMPTION_FIELDS = ("preemptible", "preempt_grace_sec")


def request_hash(body: SubmitJobBody) -> str:
    """Fingerprint of the whole request, retry policy included (an Idempotency-Key replay
    with another policy is another request); without a policy (nor preemption fields) it
    is ``body_hash``."""
    fingerprint = body_hash(body)
    preemption = body.model_dump(mode="json", include=set(PREEMPTION_FIELDS), exclude_none=True)
    if body.retry is None and not preemption:
        return fingerprint
    policy = canonical_json(body.retry.model_dump(mode="json")) if body.retry else "null"
    if preemption:  # a replay asking another preemption is another request
        policy += "/" + canonical_json(preemption)
    return hashlib.sha256(f"{fingerprint}/{policy}".encode()).hexdigest()


def seed_of(body: SubmitJobBody, fingerprint: str | None = None) -> int:
    """The seed ``body`` runs with: its own, else the default derived from its hash."""
    if body.seed is not None:
        return body.seed
    return default_seed(fingerprint or body_hash(body))


def default_seed(fingerprint: str) -> int:
    """The seed of a body that names none: derived from the body, so the same body resolves
    to the same spec (and spec_hash) every time. Send ``seed`` to vary it."""
    return int(fingerprint[:8], 16) % 2**31


def draft(
    body: SubmitJobBody,
    catalog: Catalog,
    *,
    config: Mapping[str, Any] | None = None,
    fingerprint: str | None = None,
) -> JobSpec:
    """The resolved spec of ``body`` before admission (limits as asked); raise ``Problem``
    (400/422) when it cannot run. ``config`` replaces the body's (a RunSpec's folded layers)."""
    stack, resolved_config, found = issues(body, catalog, config)
    raise_issues(found)
    assert stack is not None
    return build(body, stack, resolved_config, fingerprint)


def build(
    body: SubmitJobBody,
    stack: Stack,
    resolved_config: dict[str, Any],
    fingerprint: str | None = None,
) -> JobSpec:
    """The spec of a body that has no issues, with its validated config. ``fingerprint``
    (``body_hash``) gives a body without a ``seed`` its default seed; it is hashed here when
    not given and needed (a seeded body is not hashed at all)."""
    command = list(body.command) if body.command else list(stack.default_command)
    outputs = [o.model_dump() for o in body.outputs]
    known_globs = {o["glob"] for o in outputs}
    outputs += [o.model_dump() for o in stack.default_outputs if o.glob not in known_globs]
    # validated from its stored form: every key it has is one it writes (JobSpec.stored)
    return JobSpec.model_validate(
        {
            "stack": stack.name,
            "image": body.image or stack.image,
            "command": command,
            "env": dict(body.env),
            "config": resolved_config,
            "workspace": body.workspace.model_dump() if body.workspace else None,
            "inputs": [m.model_dump() for m in body.inputs],
            "outputs": outputs,
            "limits": body.limits.model_dump(),
            "seed": body.seed if body.seed is not None else seed_of(body, fingerprint),
            "requires": _merge_requires(body.requires, stack.requires),
            "mode": body.mode,
            "weights": dict(body.weights),
            "weights_preset": body.weights_preset,
            "isolation": body.isolation,
            # not hashed: how often to try does not change what a try runs
            **({"retry": body.retry.model_dump()} if body.retry is not None else {}),
            # not hashed either; fixed by admission (``preemption``) when unset
            **({"preemptible": body.preemptible} if body.preemptible is not None else {}),
            **(
                {"preempt_grace_sec": body.preempt_grace_sec}
                if body.preempt_grace_sec is not None
                else {}
            ),
            # a gang's ranks; absent for a plain job (its spec and hash as before)
            **({"nodes": body.nodes} if body.nodes > 1 else {}),
        }
    )


def retry_policy(spec: JobSpec) -> RetryBody | None:
    """The retry policy a resolved spec carries, if any."""
    return spec.retry


def finish(
    spec: JobSpec,
    *,
    priority: int,
    project: str,
    limits: Mapping[str, Any] | None = None,
    known_hash: str | None = None,
) -> ResolvedJob:
    """Fix ``spec`` with the admitted ``limits`` (the clamp's four keys) and fingerprint it.
    ``known_hash`` is reused when the limits change nothing (a rerun keeps its spec_hash)."""
    if limits is not None:
        admitted = spec.with_limits(limits)
        if admitted.limits != spec.limits:
            spec, known_hash = admitted, None
    return ResolvedJob(
        spec=spec,
        spec_hash=known_hash or spec_hash(spec),
        priority=priority,
        project=project,
    )


def resolve(body: SubmitJobBody, catalog: Catalog) -> ResolvedJob:
    """Resolve a submit body against the catalog, limits as asked (no admission); raise
    ``Problem`` (400/422) when it can't."""
    return finish(draft(body, catalog), priority=body.priority, project=body.project)


def inline_path(mount_path: str) -> str:
    """The relative file an inline workspace's code is written to inside the job dir."""
    path = mount_path.strip()
    if path == WORK_ROOT or path.rstrip("/") == WORK_ROOT or not path:
        return DEFAULT_INLINE_FILE
    if path.startswith(WORK_ROOT + "/"):
        path = path[len(WORK_ROOT) + 1 :]
    path = path.lstrip("/")
    return path if not path.endswith("/") else path + DEFAULT_INLINE_FILE


def mount_relpath(mount_path: str) -> str:
    """Where a (non-inline) mount lands inside the job dir, relative; ``""`` is the job dir
    itself: ``/work`` -> ``""``, ``/work/data`` -> ``data``, ``/data`` -> ``data``."""
    path = mount_path.strip()
    if path == WORK_ROOT or path.startswith(WORK_ROOT + "/"):
        path = path[len(WORK_ROOT) :]
    return "/".join(part for part in path.split("/") if part and part != ".")


def output_glob(glob: str) -> str:
    """An output glob relative to the job dir (``/work/out/*.csv`` -> ``out/*.csv``)."""
    if glob.startswith(WORK_ROOT + "/"):
        glob = glob[len(WORK_ROOT) + 1 :]
    while glob.startswith("./"):
        glob = glob[2:]
    return glob


def execution_env(job_id: str, spec: JobSpec) -> dict[str, str]:
    """The environment the job's process gets: config, then the job's env, then platform keys."""
    env = config_env(spec.config)
    env.update({k: v for k, v in spec.env.items() if k not in (SETUP_KEY,)})
    env["RUNPLANE_JOB_ID"] = job_id
    env["RUNPLANE_SEED"] = str(spec.seed)
    return env
