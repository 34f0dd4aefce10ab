"""Planning a run: fold the body's config layers, check the body against its stack, and
shape the ResolvedRun that is stored with the job.

``plan`` is pure and never enqueues: POST /v1/runs/validate and /v1/runs/resolve answer
from it, and every submit (plain or layered) goes through it before admission.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runplane.jobs.jobspec import JobSpec
from runplane.jobs.spec import Issue, SubmitJobBody, issues
from runplane.layering import Folded, fold
from runplane.policy.clamp import LIMIT_KEYS
from runplane.runs.spec import RunSpecBody, config_layers
from runplane.stacks import Catalog, Stack

#: How a job without a stored run (created before runs existed) is shown: no layers.
NO_LAYERS = Folded(values={}, provenance={}, diffs=())


@dataclass(frozen=True, slots=True)
class RunProblem:
    """The spec's RunProblem, plus the layer that set the offending key (when one did)."""

    key: str
    code: str
    message: str
    layer: str | None = None

    def as_dict(self) -> dict[str, str]:
        out = {"key": self.key, "code": self.code, "message": self.message}
        if self.layer:
            out["layer"] = self.layer
        return out


@dataclass(frozen=True, slots=True)
class Plan:
    body: SubmitJobBody
    stack: Stack | None
    folded: Folded
    #: the effective config: validated with the stack's defaults filled in when valid,
    #: else the folded layers as given
    config: dict[str, Any]
    issues: list[Issue]
    warnings: list[RunProblem]

    @property
    def has_runspec(self) -> bool:
        return isinstance(self.body, RunSpecBody) and self.body.layers is not None

    @property
    def ok(self) -> bool:
        return not self.issues

    def errors(self) -> list[RunProblem]:
        out = []
        for issue in self.issues:
            p = issue.problem
            key = p.key.removeprefix("config.") if p.key.startswith("config.") else None
            layer = self.folded.provenance.get(key) if key is not None else None
            out.append(RunProblem(p.key, p.code, p.message, layer))
        return out

    def command(self) -> list[str]:
        if self.body.command:
            return list(self.body.command)
        return list(self.stack.default_command) if self.stack is not None else []


def plan(body: SubmitJobBody, catalog: Catalog) -> Plan:
    folded = fold(config_layers(body))
    stack, resolved, found = issues(body, catalog, folded.values)
    warnings = [
        RunProblem(
            f"layers.{name}",
            "unknown_layer",
            f"layer {name!r} is not one of platform, org, project, user; it was ignored",
        )
        for name in (body.unknown_layers() if isinstance(body, RunSpecBody) else [])
    ]
    config_ok = not any(issue.code == "invalid_config" for issue in found)
    return Plan(
        body=body,
        stack=stack,
        folded=folded,
        config=resolved if config_ok and stack is not None else dict(folded.values),
        issues=found,
        warnings=warnings,
    )


def resources(limits: Mapping[str, Any]) -> dict[str, int]:
    """RunResources: the four limits as integers, 0 = unspecified (the node's share)."""
    return {key: int(limits.get(key) or 0) for key in LIMIT_KEYS}


def resolved_run(
    stack: str,
    command: list[str],
    limits: Mapping[str, Any],
    config: Mapping[str, Any],
    folded: Folded,
) -> dict[str, Any]:
    """The ResolvedRun: immutable and deterministic for a given body and policy."""
    return {
        "stack": stack,
        "command": list(command),
        "resources": resources(limits),
        "config": dict(sorted(config.items())),
        "provenance": dict(folded.provenance),
        "layers": [diff.as_dict() for diff in folded.diffs],
    }


def stored_run(spec: JobSpec, folded: Folded, has_runspec: bool) -> dict[str, Any]:
    """What the job row keeps: the ResolvedRun of the admitted spec and ``has_runspec``."""
    limits = spec.limits.model_dump()
    run = resolved_run(spec.stack, list(spec.command), limits, spec.config, folded)
    return {**run, "has_runspec": has_runspec}
