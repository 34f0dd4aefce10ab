"""The agents' WebSocket (``/v1/nodes/connect``) on plain ASGI messages.

The same session as the Quart route (``runplane/http/agent_session.py``), on hypercorn's
``receive``/``send`` directly: no websocket object or context, no signals, no second task
and queue between hypercorn and the session. A frame goes from hypercorn's queue to the
session's read loop, which checks it and tells the node actor.

What the Quart route gets before it runs holds here too. Its declared rule is
``OWN_CREDENTIAL`` (checked when the lane is installed): the auth hook lets every agent
through and the handler authenticates the hello. The hook only acts on a credential
header (``Authorization``, ``X-Share-Token``, ``X-Embed-Token``: a share or embed token
that is not valid is a 401), so a request with one goes to Quart, as does one with a
query string or a root path. An exception out of the session is logged as Quart's error
handlers (``app.py``) log it, and the session closed as Quart closes it (1000).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runplane.auth.rules import OWN_CREDENTIAL
from runplane.http.agent_session import Server, run_session
from runplane.http.error_answers import Where, answer
from runplane.http.openapi.route_doc import doc_of
from runplane.http.routes.agents import connect

from .lanes import Lane, Next, Receive, Scope, Send

PATH = "/v1/nodes/connect"
#: the headers the auth hook reads on this route: with one of them, Quart answers
CREDENTIAL_HEADERS = frozenset({b"authorization", b"x-share-token", b"x-embed-token"})
#: how the store's outage and full-disk logs name the request (as app.py does)
WEBSOCKET = "WEBSOCKET"
NORMAL_CLOSURE = 1000


class AsgiSocket:
    """The session's :class:`~runplane.http.agent_session.Socket` on ASGI messages."""

    __slots__ = ("_receive", "_send", "accepted", "closed", "gone", "scope")

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.scope = scope
        self._receive = receive
        self._send = send
        self.accepted = False
        self.closed = False
        self.gone = False

    async def accept(self) -> None:
        if not self.accepted:
            self.accepted = True
            await self._send({"type": "websocket.accept", "subprotocol": None, "headers": []})

    async def receive(self) -> str | bytes | None:
        while not self.gone:
            message = await self._receive()
            kind = message["type"]
            if kind == "websocket.receive":
                # as Quart reads it: the bytes of a binary frame, else the text
                return message.get("bytes") or message.get("text") or ""
            if kind == "websocket.disconnect":
                self.gone = True
            # websocket.connect: answered by accept
        return None

    async def send(self, text: str) -> None:
        await self._send({"type": "websocket.send", "bytes": None, "text": text})

    async def close(self, code: int, reason: str) -> None:
        if self.closed:
            raise RuntimeError("Cannot close websocket multiple times")  # as Quart
        self.closed = True
        await self._send({"type": "websocket.close", "code": code, "reason": reason})


def plain(scope: Scope) -> bool:
    """Whether the lane answers this request: nothing the auth hook would read, no query
    string, no root path."""
    if scope.get("query_string") or scope.get("root_path"):
        return False
    return not any(name.lower() in CREDENTIAL_HEADERS for name, _ in scope.get("headers", ()))


def agents_lane(extensions: Mapping[str, Any]) -> Lane:
    """The lane, for an app whose services are in ``extensions`` once it started."""
    declared = doc_of(connect)
    if declared is None or declared.rule != OWN_CREDENTIAL:
        # the lane skips the auth hook: only right while the route leaves the hello to it
        raise RuntimeError(f"the lean lane of {PATH} needs its route's rule OWN_CREDENTIAL")

    async def lane(scope: Scope, receive: Receive, send: Send, app: Next) -> None:
        if not plain(scope) or "runplane" not in extensions:
            await app(scope, receive, send)
            return
        sock = AsgiSocket(scope, receive, send)
        try:
            await run_session(sock, Server.of(extensions))
        except Exception as exc:
            log_failure(exc, extensions)
        if sock.accepted and not sock.closed and not sock.gone:
            sock.closed = True  # as Quart ends a websocket its handler left open
            await send({"type": "websocket.close", "code": NORMAL_CLOSURE})

    return lane


def log_failure(exc: Exception, extensions: Mapping[str, Any]) -> None:
    """Log an exception out of the session as Quart's error handlers log one out of the
    websocket route: the same ``error_answers`` (its answer has nowhere to go)."""
    answer(exc, Where(None, WEBSOCKET, PATH, extensions.get("runplane.ha.leading")))
