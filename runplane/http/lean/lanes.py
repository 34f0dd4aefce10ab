"""The lean lanes' dispatcher: an ASGI app between the request log and Quart.

A lane is registered for one exact ``(scope type, method, path)``: ``("http", "POST",
"/v1/jobs")``, ``("websocket", "GET", "/v1/nodes/connect")``. A request that matches one
goes to that lane, with ``next`` (Quart's ASGI app) to hand the request to whenever it
leaves the happy path, before anything is written; anything else goes straight to
Quart. A layer (``wrap``) sees every request instead: what answers a route with path
parameters (an SSE follow) wraps the app.

``RUNPLANE_LEAN_LANES=0`` installs no lane: Quart answers everything, the same bytes
(``tests/http/lean/``), slower.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
#: An ASGI app (Quart's, or the next layer).
Next = Callable[[Scope, Receive, Send], Awaitable[None]]
#: A lane: the request, and the app to hand it to when it leaves the happy path.
Lane = Callable[[Scope, Receive, Send, Next], Awaitable[None]]


class LeanLanes:
    """Routes each request to its lane, or to ``app``."""

    def __init__(self, app: Next) -> None:
        self.app = app
        self._inner: Next = app
        self._lanes: dict[tuple[str, str, str], Lane] = {}

    def add(self, kind: str, method: str, path: str, lane: Lane) -> None:
        """Answer ``kind`` (``http``/``websocket``) requests for ``method path`` with
        ``lane``; a websocket's method is ``GET``."""
        key = (kind, method, path)
        if key in self._lanes:
            raise ValueError(f"a lean lane already answers {method} {path}")
        self._lanes[key] = lane

    def wrap(self, layer: Callable[[Next], Next]) -> None:
        """Put ``layer`` around the app the lanes hand off to (and that answers the rest)."""
        self._inner = layer(self._inner)

    @property
    def lanes(self) -> list[tuple[str, str, str]]:
        return sorted(self._lanes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http" or kind == "websocket":
            lane = self._lanes.get((kind, scope.get("method", "GET"), scope["path"]))
            if lane is not None:
                await lane(scope, receive, send, self._inner)
                return
        await self._inner(scope, receive, send)
