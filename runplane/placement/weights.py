"""Scoring weight names, the presets and their validation (no dependencies).

A job's effective weights are its preset's (or the default table when it names none)
updated with its explicit ``weights``: an explicit key overrides the preset's value, a key
the preset lacks extends it, and ``0`` switches a scorer off. Unknown names and negative or
non-finite values are problems the submit path reports (see :func:`weight_problems`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

BINPACK = "binpack"
SPREAD = "spread"
GPU_FIT = "gpu_fit"
DLPERF = "dlperf"
RELIABILITY = "reliability"
#: The share of the job's images a node's cache holds already (no pull before it starts);
#: weighs only for a job that runs in images (``JobDemand.active_weights``).
IMAGE_CACHED = "image_cached"

#: Every valid key of a job's ``weights`` map, in scoring order.
WEIGHT_NAMES: tuple[str, ...] = (BINPACK, SPREAD, GPU_FIT, DLPERF, RELIABILITY, IMAGE_CACHED)

#: Weights used when a job names no preset.
DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {BINPACK: 1.0, GPU_FIT: 1.0, RELIABILITY: 0.5, IMAGE_CACHED: 1.0}
)

#: ``weights_preset`` values and their weight tables.
PRESETS: Mapping[str, Mapping[str, float]] = MappingProxyType(
    {
        # Long GPU runs: fast, dependable hardware first; avoid wasting GPUs a bit. A pull
        # is small against hours of training: the image cache weighs least here.
        "training": MappingProxyType(
            {DLPERF: 3.0, RELIABILITY: 2.0, GPU_FIT: 1.0, BINPACK: 0.5, IMAGE_CACHED: 0.5}
        ),
        # A human waits on it: the least loaded node answers fastest, and one that has the
        # image starts without a pull.
        "interactive": MappingProxyType(
            {SPREAD: 3.0, RELIABILITY: 1.0, DLPERF: 0.5, IMAGE_CACHED: 2.0}
        ),
        # Throughput: pack tightly so big nodes stay free for big jobs; many short jobs of
        # one image pull it once.
        "batch": MappingProxyType(
            {BINPACK: 3.0, GPU_FIT: 2.0, RELIABILITY: 0.5, IMAGE_CACHED: 1.0}
        ),
    }
)

#: An explicit weight above this is refused (it would only drown the others).
MAX_WEIGHT = 1000.0


@dataclass(frozen=True, slots=True)
class DemandProblem:
    """One problem with a job's placement inputs, shaped like the API's RunProblem."""

    key: str
    code: str
    message: str


def weight_problems(weights: Mapping[str, object], preset: str | None) -> list[DemandProblem]:
    """Every problem with ``weights`` / ``weights_preset``; empty when both are valid."""
    problems: list[DemandProblem] = []
    if preset is not None and preset not in PRESETS:
        problems.append(
            DemandProblem(
                "weights_preset",
                "unknown_preset",
                f"unknown weights_preset {preset!r}; valid: {', '.join(PRESETS)}",
            )
        )
    for name, value in weights.items():
        key = f"weights.{name}"
        if name not in WEIGHT_NAMES:
            problems.append(
                DemandProblem(
                    key,
                    "unknown_weight",
                    f"unknown placement weight {name!r}; valid: {', '.join(WEIGHT_NAMES)}",
                )
            )
        elif isinstance(value, bool) or not isinstance(value, int | float):
            problems.append(DemandProblem(key, "bad_type", f"{key} must be a number"))
        elif not math.isfinite(value) or value < 0 or value > MAX_WEIGHT:
            problems.append(
                DemandProblem(
                    key, "out_of_range", f"{key} must be a number from 0 to {MAX_WEIGHT:g}"
                )
            )
    return problems


def resolve_weights(preset: str | None, weights: Mapping[str, float]) -> dict[str, float]:
    """The effective weight of every scorer (zero for the unused ones), in scoring order.

    Assumes valid input (see :func:`weight_problems`).
    """
    table = dict(PRESETS[preset] if preset is not None else DEFAULT_WEIGHTS)
    table.update(weights)
    return {name: float(table.get(name, 0.0)) for name in WEIGHT_NAMES}
