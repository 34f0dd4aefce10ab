"""What a job row asks of a node: its placement demand (``runplane/placement``'s model)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runplane.persistence import from_json
from runplane.placement import JobDemand


def demand_of(row: Mapping[str, Any]) -> JobDemand:
    """The placement demand of a job row (``id``, ``priority`` and ``spec`` columns).
    Raises ``placement.DemandError`` for a spec placement cannot read."""
    spec = from_json(row["spec"]) if isinstance(row["spec"], str) else row["spec"]
    return JobDemand.from_spec(
        job_id=row["id"],
        priority=row["priority"],
        created_at=row["id"],  # ids sort by creation time
        limits=spec.get("limits") or {},
        requires=spec.get("requires") or {},
        weights=spec.get("weights") or {},
        weights_preset=spec.get("weights_preset"),
    )
