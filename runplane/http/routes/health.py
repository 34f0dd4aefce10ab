"""Liveness probes: ``GET /healthz`` and its versioned alias ``GET /v1/healthz``."""

from __future__ import annotations

from quart import Blueprint, Response

blueprint = Blueprint("health", __name__)


@blueprint.get("/healthz")
@blueprint.get("/v1/healthz")
async def healthz() -> Response:
    return Response("ok", content_type="text/plain; charset=utf-8")
