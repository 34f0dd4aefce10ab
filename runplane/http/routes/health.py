"""Liveness probes: ``GET /healthz`` and its versioned alias ``GET /v1/healthz``."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, current_app

from runplane.auth.rules import PUBLIC
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import ignores_query

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
@blueprint.get("/v1/healthz")
@ignores_query
@doc("Liveness: the text ok", content="text", rule=PUBLIC)
async def healthz() -> Response:
    """Always ``ok``. Query parameters are ignored, not refused: load balancers and probes
    may add their own (cache busters), and a liveness probe must not fail on them."""
    return Response("ok", content_type="text/plain; charset=utf-8")


@blueprint.get("/v1/ha")
@doc(
    "High availability: this replica's role and the leader it knows",
    v.HaStatus,
    # a replica's role and the leader it knows (operations: which replica leads)
    rule=PUBLIC,
)
async def ha_status() -> dict[str, Any]:
    """An addition (docs/operations.md "High availability"). Under ``RUNPLANE_HA=1`` each
    replica answers for itself (a follower without asking the leader); a single server is
    always the leader of its one-replica deploy."""
    status = current_app.extensions.get("runplane.ha")
    if status is None:
        return {"ha": False, "replica": None, "role": "leader", "epoch": None, "leader": None}
    return dict(status())
