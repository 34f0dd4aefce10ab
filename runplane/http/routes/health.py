"""Liveness and readiness probes: ``GET /healthz`` (the process serves) and ``GET /readyz``
(it can do work: the store answers, the actor tree runs, the replica leads), each with its
versioned alias under ``/v1``. docs/operations.md "Health and readiness"."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, current_app

from runplane.auth.rules import PUBLIC
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import ignores_query
from runplane.http.readiness import STORE_RETRY_AFTER_SEC, Readiness
from runplane.problems import Problem

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
@blueprint.get("/v1/healthz")
@ignores_query
@doc("Liveness: the text ok", content="text", rule=PUBLIC)
async def healthz() -> Response:
    """Always ``ok``. Query parameters are ignored, not refused: load balancers and probes
    may add their own (cache busters), and a liveness probe must not fail on them."""
    return Response("ok", content_type="text/plain; charset=utf-8")


@blueprint.get("/readyz")
@blueprint.get("/v1/readyz")
@ignores_query
@doc(
    "Readiness: the text ok when the store answers, the actor tree runs and this replica "
    "leads; else 503 with the reason",
    content="text",
    rule=PUBLIC,
)
async def readyz() -> Response:
    """``ok`` only when this server can do work; else ``503`` with ``Retry-After`` and a
    problem whose code names the reason: ``store_unavailable`` (the store did not answer
    a trivial read and an empty write in time), ``not_ready`` (the actor tree is not
    running), ``not_leader`` (``RUNPLANE_HA=1``: the lease is not sure to run). Query
    parameters are ignored, as for ``/healthz``."""
    readiness: Readiness | None = current_app.extensions.get("runplane.readiness")
    reason = (
        ("not_ready", "the server is still starting")
        if readiness is None
        else await readiness.reason()
    )
    if reason is None:
        return Response("ok", content_type="text/plain; charset=utf-8")
    code, detail = reason
    raise Problem(503, code, detail, headers={"Retry-After": str(STORE_RETRY_AFTER_SEC)})


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
