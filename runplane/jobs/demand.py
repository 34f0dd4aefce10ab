"""What a job asks of a node: its placement demand (``runplane/placement``'s model)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runplane.placement import JobDemand


def demand_of(
    job_id: str, priority: int, spec: Mapping[str, Any], org_id: str | None = None
) -> JobDemand:
    """The placement demand of a job (its id, priority, decoded spec and org: nodes of
    another org do not run it). Raises ``placement.DemandError`` for a spec placement
    cannot read."""
    return JobDemand.from_spec(
        job_id=job_id,
        priority=priority,
        created_at=job_id,  # ids sort by creation time
        limits=spec.get("limits") or {},
        requires=spec.get("requires") or {},
        weights=spec.get("weights") or {},
        weights_preset=spec.get("weights_preset"),
        isolation=spec.get("isolation"),
        org_id=org_id,
    )
