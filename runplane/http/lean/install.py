"""Which lean lanes a server runs: every one, unless ``RUNPLANE_LEAN_LANES=0``."""

from __future__ import annotations

from typing import Any

from runplane.settings import Settings

from . import sse, submits
from .agents import agents_lane
from .lanes import LeanLanes, Next


def lean_app(app: Any, settings: Settings, inner: Any) -> Next:
    """``inner`` (Quart's ASGI app) behind the lean lanes of ``app`` (the Quart app, whose
    extensions hold the services once its lifespan started); ``inner`` itself when the
    lanes are off."""
    if not settings.lean_lanes:
        quart: Next = inner
        return quart
    lanes = LeanLanes(inner)
    submits.install(app, lanes)
    lanes.add("websocket", "GET", "/v1/nodes/connect", agents_lane(app.extensions))
    lanes.wrap(sse.layer)  # the SSE follows' writes (docs/lean-lanes.md)
    return lanes
