"""Liveness probes: ``GET /healthz`` and its versioned alias ``GET /v1/healthz``."""

from __future__ import annotations

from quart import Blueprint, Response

from runplane.http.openapi import doc
from runplane.http.query import ignores_query

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
@blueprint.get("/v1/healthz")
@ignores_query
@doc("Liveness: the text ok", content="text")
async def healthz() -> Response:
    """Always ``ok``. Query parameters are ignored, not refused: load balancers and probes
    may add their own (cache busters), and a liveness probe must not fail on them."""
    return Response("ok", content_type="text/plain; charset=utf-8")
