"""``/v1/nodes/connect``: the node agents' WebSocket (protocol: ``runplane/agent/protocol.py``).

The session itself is ``runplane/http/agent_session.py``; this route carries it on Quart's
``websocket``. With the lean lanes on (the default) the lean lane
(``runplane/http/lean/agents.py``) carries the same session on plain ASGI messages and
hands this route only what it does not answer itself; this declaration stays the route's
record either way: its auth rule, its OpenAPI entry, the route matrix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from quart import Blueprint, current_app, websocket

from runplane.auth.rules import OWN_CREDENTIAL
from runplane.http.agent_session import Server, run_session
from runplane.http.openapi import doc

blueprint = Blueprint("agents", __name__)


class QuartSocket:
    """The session's :class:`~runplane.http.agent_session.Socket` on Quart's websocket."""

    def __init__(self) -> None:
        self.scope: Mapping[str, Any] = websocket.scope

    async def accept(self) -> None:
        await websocket.accept()

    async def receive(self) -> str | bytes:
        # an empty binary frame reads as None; the agent going cancels the handler
        return await websocket.receive() or ""

    async def send(self, text: str) -> None:
        await websocket.send(text)

    async def close(self, code: int, reason: str) -> None:
        await websocket.close(code, reason)


@blueprint.websocket("/v1/nodes/connect")
@doc(
    "The node agents' WebSocket",
    # it authenticates in its handler (node credential, join token or open enrollment;
    # runplane/actors/fleet.py), so the HTTP layer lets it through
    rule=OWN_CREDENTIAL,
)
async def connect() -> None:
    await run_session(QuartSocket(), Server.of(current_app.extensions))
