"""A lean lane's side of one HTTP exchange: the request's headers and body read off the
ASGI messages, the body replayed when the request is handed to Quart, and a Quart
``Response`` sent the way Quart's own ASGI layer sends it (the same status, headers and
bytes)."""

from __future__ import annotations

from typing import Any

import trio
from quart import Response
from quart.utils import encode_headers

from .lanes import Receive, Scope, Send


def header_map(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name, the first of each, decoded as Quart
    decodes them (latin-1), so ``found.get(name)`` is Quart's ``headers.get(name)``."""
    found: dict[str, str] = {}
    for name, value in scope["headers"]:
        found.setdefault(name.decode("latin1").lower(), value.decode("latin1"))
    return found


def remote_addr(scope: Scope) -> str:
    """The client's address as Quart's ``request.remote_addr`` reads it."""
    client = scope.get("client") or ["<local>"]
    return str(client[0])


class Body:
    """The request body read so far: ``complete`` once the client sent all of it within
    ``limit`` bytes; otherwise what came before the limit (or a disconnect)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0
        self.ended = False  # the client sent the body's end
        self.disconnected = False

    @property
    def complete(self) -> bool:
        """All of the body, within the limit it was read with."""
        return self.ended and not self.over

    @property
    def over(self) -> bool:
        return self.size > self.limit

    @property
    def data(self) -> bytes:
        return b"".join(self.chunks)


async def read_body(receive: Receive, limit: int, within_sec: float) -> Body:
    """Read the request body, stopping past ``limit`` bytes, at a disconnect, or after
    ``within_sec`` seconds (Quart's ``BODY_TIMEOUT``: it then answers the slow client)."""
    body = Body(limit)
    with trio.move_on_after(within_sec):
        await _read(receive, body)
    return body


async def _read(receive: Receive, body: Body) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            body.disconnected = True
            return
        chunk = message.get("body", b"")
        if chunk:
            body.chunks.append(chunk)
            body.size += len(chunk)
        if not message.get("more_body", False):
            body.ended = True
            return
        if body.over:
            return


def replay(body: Body, receive: Receive) -> Receive:
    """``receive`` with what was read of the body given back first, so Quart reads the
    request as if nobody had touched it."""
    first: list[dict[str, Any]] = []
    if body.disconnected:
        first.append({"type": "http.disconnect"})
    else:
        first.append({"type": "http.request", "body": body.data, "more_body": not body.ended})

    async def replayed() -> dict[str, Any]:
        if first:
            return first.pop(0)
        return await receive()

    return replayed


async def send_response(send: Send, response: Response) -> None:
    """Send ``response`` (a complete body) as Quart's ASGI layer does."""
    data = await response.get_data(as_text=False)
    await send(
        {
            "type": "http.response.start",
            "status": response.status_code,
            "headers": encode_headers(response.headers),
        }
    )
    await send({"type": "http.response.body", "body": data, "more_body": False})
