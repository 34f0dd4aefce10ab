"""Server-sent events on a lean layer: the follow's handshake in Quart, its writes below.

An SSE follow (``GET /v1/jobs/{id}/streams/{name}/data``, ``GET /v1/jobs/{id}/events``)
sends one head and then thousands of writes. The handshake stays the route's, in Quart:
the auth rule, the ticket, the checks, every problem. What changes is who writes the
frames. Behind this layer the route's answer (:func:`sse_response`) hands its frames
iterator to the layer (through the scope) and gives Quart an empty body marked with an
internal header; the layer strips the marker from the head Quart sends, drops Quart's end
of the empty body, and once Quart is done writes the frames itself straight to the
``send`` below the request log (hypercorn's, or the HA gate's), adding their bytes to the
log line's count (:class:`runplane.http.middleware.Tally`): the same status, headers and
bytes as Quart's own iteration, without Quart's or the log wrapper's per-write work.

It ends as Quart's did: at the frames' end (the end of the body), when the client goes
(``http.disconnect``: no end is sent, the log line says ``client_gone``), or when its task
is cancelled (a server shutdown, an HA step-down: the gate's cancel scope wraps it). The
frames iterator is closed either way, so its ring cursor is freed.

Without this layer (``RUNPLANE_LEAN_LANES=0``) no handoff is in the scope and
:func:`sse_response` answers exactly as before: Quart iterates the frames.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

import trio
from quart import Response, request

from runplane.http.middleware import TALLY, Tally

from . import wire
from .lanes import Next, Receive, Scope, Send

#: The scope key of a follow's :class:`Handoff`.
HANDOFF = "runplane.lean.sse"
#: The internal header that marks a handed-off answer; stripped, never sent.
MARKER = "X-Runplane-Lean-Sse"
_MARKER = MARKER.lower().encode()
#: The paths of the SSE follows (the only GETs this layer looks at).
FOLLOWS = ("/data", "/events")


class Handoff:
    """Where a follow's route leaves its frames for the layer."""

    __slots__ = ("frames",)

    def __init__(self) -> None:
        self.frames: AsyncIterator[bytes] | None = None


_NONE: tuple[bytes, ...] = ()


async def _nothing() -> AsyncIterator[bytes]:
    """No frame: a streamed body (no Content-Length) that Quart ends at once."""
    for frame in _NONE:
        yield frame


def sse_response(frames: AsyncIterator[bytes]) -> Response:
    """A follow's answer: ``frames`` as ``text/event-stream``, not cached, not buffered by
    a proxy, without a response timeout; behind the lean layer, handed to it."""
    handoff = request.scope.get(HANDOFF)
    body = frames
    if isinstance(handoff, Handoff):
        handoff.frames, body = frames, _nothing()
    response = Response(body, content_type="text/event-stream")
    response.headers["Cache-Control"] = "no-cache"
    response.headers["X-Accel-Buffering"] = "no"
    if body is not frames:
        response.headers[MARKER] = "1"
    response.timeout = None
    return response


def layer(app: Next) -> Next:
    """The lean SSE layer around ``app`` (Quart's ASGI app)."""

    async def follow(scope: Scope, receive: Receive, send: Send) -> None:
        tally = scope.get(TALLY)
        if (
            scope["type"] != "http"
            or scope["method"] != "GET"
            or not scope["path"].endswith(FOLLOWS)
            or not isinstance(tally, Tally)
        ):
            await app(scope, receive, send)
            return
        handoff = scope[HANDOFF] = Handoff()
        marked = gone = False

        async def watch() -> dict[str, Any]:
            nonlocal gone
            message = await receive()
            gone = gone or message["type"] == "http.disconnect"
            return message

        async def head_only(message: dict[str, Any]) -> None:
            nonlocal marked
            if message["type"] == "http.response.start":
                headers = message.get("headers", [])
                kept = [h for h in headers if h[0] != _MARKER]
                if len(kept) != len(headers):
                    marked, message = True, {**message, "headers": kept}
            elif marked:
                return  # Quart's end of the empty body: the frames follow
            await send(message)

        try:
            await app(scope, watch, head_only)
        except BaseException:
            if handoff.frames is not None:  # Quart failed after the handoff: nothing to write
                await _close(handoff.frames)
            raise
        frames = handoff.frames
        if frames is None:
            return
        if not marked or gone:  # not our answer after all, or the client already left
            await _close(frames)
            return
        await write(frames, receive, tally)

    return follow


async def write(frames: AsyncIterator[bytes], receive: Receive, tally: Tally) -> None:
    """Write ``frames`` as the body's chunks, then the end; stop early, without the end,
    when the client goes. ``frames`` is closed either way."""
    send = cast(Send, tally.send)
    direct = wire.chunk_writer(send)  # below hypercorn's ASGI send, where it can
    left = False

    async def until_gone(cancel_scope: trio.CancelScope) -> None:
        nonlocal left
        while (await receive())["type"] != "http.disconnect":
            pass
        left = True
        cancel_scope.cancel()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(until_gone, nursery.cancel_scope)
            async for frame in frames:
                tally.sent += len(frame)
                if direct is not None:
                    await direct(frame)
                else:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
            nursery.cancel_scope.cancel()
    finally:
        await _close(frames)
    if not left:
        await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _close(frames: AsyncIterator[bytes]) -> None:
    aclose = getattr(frames, "aclose", None)
    if aclose is not None:
        with trio.CancelScope(shield=True):
            await aclose()
