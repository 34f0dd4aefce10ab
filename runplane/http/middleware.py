"""ASGI middleware around the Quart app: a request id and one structured log line per request."""

from __future__ import annotations

import logging
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from typing import Any, cast

from hypercorn.typing import ASGIReceiveCallable, ASGISendCallable, ASGISendEvent
from hypercorn.typing import Scope as ASGIScope

log = logging.getLogger("runplane.http")

REQUEST_ID_HEADER = b"x-request-id"
_SAFE_ID = re.compile(rb"^[A-Za-z0-9._:-]{1,64}$")

Scope = dict[str, Any]
#: The scope key of the request's :class:`Tally`.
TALLY = "runplane.tally"


def new_request_id() -> str:
    return "req_" + secrets.token_hex(8)


def _incoming_request_id(scope: Mapping[str, Any]) -> str | None:
    headers: Iterable[tuple[bytes, bytes]] = scope.get("headers", ())
    for name, value in headers:
        if name == REQUEST_ID_HEADER and _SAFE_ID.match(value):
            return value.decode()
    return None


class Tally:
    """What a request's log line counts of its answer, and the ``send`` below this
    wrapper (hypercorn's, or the HA gate's), in the scope as ``runplane.tally``: a lean
    writer that sends below the wrapper (``runplane/http/lean/sse.py``) adds its bytes to
    ``sent`` so the line stays the same."""

    __slots__ = ("send", "sent")

    def __init__(self, send: ASGISendCallable) -> None:
        self.send = send
        self.sent = 0


class RequestLogMiddleware:
    """Gives each HTTP request an id (kept from a sane incoming ``X-Request-ID`` or minted),
    exposes it as ``scope["runplane.request_id"]`` and in the response header, and logs one
    line with method, path, status, bytes and duration when the response ends. A request
    that ended without a response is logged with status 500, or 499 (nginx's "client
    closed request") when the client went away first, with ``"client_gone": true``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(
        self, scope: ASGIScope, receive: ASGIReceiveCallable, send: ASGISendCallable
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _incoming_request_id(scope) or new_request_id()
        # ASGI lets middleware add keys to the scope; hypercorn's TypedDicts do not list them
        cast(Scope, scope)["runplane.request_id"] = request_id
        started = time.perf_counter()
        status = 0
        tally = cast(Scope, scope)[TALLY] = Tally(send)
        gone = False

        async def receive_wrapper() -> Any:
            nonlocal gone
            message = await receive()
            if message["type"] == "http.disconnect":
                gone = True
            return message

        async def send_wrapper(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [h for h in message.get("headers", []) if h[0] != REQUEST_ID_HEADER]
                headers.append((REQUEST_ID_HEADER, request_id.encode()))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body":
                tally.sent += len(message.get("body", b""))
            await send(cast(ASGISendEvent, message))

        try:
            await self.app(scope, receive_wrapper, send_wrapper)
        finally:
            client = scope.get("client")
            extra = {"client_gone": True} if gone else {}
            log.info(
                "request",
                extra={
                    **extra,
                    "request_id": request_id,
                    "method": scope.get("method"),
                    "path": scope.get("path"),
                    "status": status or (499 if gone else 500),
                    "bytes": tally.sent,
                    "duration_ms": round((time.perf_counter() - started) * 1000, 3),
                    "remote": client[0] if client else None,
                },
            )
