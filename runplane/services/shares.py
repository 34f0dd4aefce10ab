"""Fair share between orgs: what ``GET /v1/analytics/share`` and ``/metrics`` read, and
where a changed weight goes. Placement keeps the shares (it sees every assignment and
release); this service asks it (``placement.Shares``) and tells it (``SetWeight``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runplane.actors import placement as pl
from runplane.placement.fairshare import ShareRow
from runplane.runtime import ActorRef


def share_view(row: ShareRow) -> dict[str, Any]:
    cpu, ram, gpus = row.running
    return {
        "org_id": row.org_id,
        "weight": row.weight,
        "share": round(row.share, 6),
        "dominant_resource": row.dominant_resource,
        "usage": round(row.usage, 6),
        "weighted_usage": round(row.key, 6),
        "running": {
            "jobs": row.running_jobs,
            "cpu_cores": round(cpu, 3),
            "ram_gb": round(ram, 3),
            "gpus": round(gpus),
        },
        "waiting_jobs": row.waiting_jobs,
    }


class FairShares:
    def __init__(
        self, placement: Callable[[], ActorRef[pl.PlacementMsg]], half_life_sec: float
    ) -> None:
        self._placement = placement
        self.half_life_sec = half_life_sec

    async def rows(self, org_id: str | None = None) -> list[ShareRow]:
        """Every org's standing, lowest weighted usage (next to go) first; with
        ``org_id``, that org's row alone."""
        return await self._placement().try_ask(pl.Shares(org_id))

    async def view(self, org_id: str | None) -> dict[str, Any]:
        """``GET /v1/analytics/share``: the rows as the API shows them (``org_id`` None:
        every org), lowest weighted usage first."""
        rows = [share_view(r) for r in await self.rows(org_id)]
        return {"half_life_sec": self.half_life_sec, "orgs": rows}

    async def weight_changed(self, org_id: str, weight: float | None) -> None:
        await self._placement().tell(pl.SetWeight(org_id, weight))
