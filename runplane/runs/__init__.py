"""Layered-config runs (RunSpec): a submit body plus config layers platform < org <
project < user, folded into the effective config with provenance per key and a diff per
layer, validated against the stack's config fields, resolved immutably and
deterministically (the same body gives the same ResolvedRun and spec_hash)."""

from runplane.runs.resolve import (
    NO_LAYERS,
    Plan,
    RunProblem,
    plan,
    resolved_run,
    resources,
    stored_run,
)
from runplane.runs.spec import RunSpecBody

__all__ = [
    "NO_LAYERS",
    "Plan",
    "RunProblem",
    "RunSpecBody",
    "plan",
    "resolved_run",
    "resources",
    "stored_run",
]
