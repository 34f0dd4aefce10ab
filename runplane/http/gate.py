"""The gate in front of a replica's app under ``RUNPLANE_HA=1`` (an ASGI app).

On the leader, once its actor tree runs, every request goes to the Quart app. On a
follower (and on a leader still rebuilding), the gate answers three things itself:

* ``GET /healthz`` and ``/v1/healthz``: ``ok`` (the process serves: a load balancer may
  send to any replica);
* ``GET /v1/ha``: this replica's view of the lease (``Elector.status``);
* everything else is proxied to the leader's advertised address: HTTP requests streamed
  both ways (uploads, downloads and SSE included), the agents' WebSocket relayed message
  by message. With no leader known, or the leader unreachable, the answer is ``503``
  ``no_leader`` with ``Retry-After: 1``: nothing was done, the client retries. A leader
  that goes away after it was sent the request, before answering, gives ``502``
  ``leader_lost``: the request may have been carried out.

When the lease moves to a new epoch every proxied exchange with the old leader is cut, so
SSE followers reconnect (with ``Last-Event-ID``) and agents say hello again, to the new one.
When this replica loses its lease (``step_down``), every exchange with its own app is cut
the same way: a request not answered yet gets ``502`` ``leader_lost`` (it may have been
carried out), an answer under way (SSE) ends, an agent's WebSocket is closed with 1012.
The replica then gives the gate a fresh app (``serve``) for its next term.

The gate has no state of its own beyond the open exchanges: it is not an actor, and knows
nothing of jobs. Request bodies and answers pass through untouched; hop-by-hop headers are
dropped and ``X-Forwarded-For`` / ``-Proto`` / ``-Host`` added (docs/operations.md).
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import trio
import trio_websocket

from runplane.http.problems import problem_body

log = logging.getLogger("runplane.http")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
ASGIApp = Callable[..., Awaitable[None]]

#: headers that belong to one connection, never forwarded (RFC 9110 7.6.1)
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
#: WebSocket handshake headers the relay makes itself
_WS_OWN = frozenset(
    {
        b"host",
        b"sec-websocket-key",
        b"sec-websocket-version",
        b"sec-websocket-extensions",
        b"sec-websocket-protocol",
        b"sec-websocket-accept",
    }
)
#: what starts an answer to the client (after one, a cut answer can only end short)
_ANSWERS = frozenset(
    {"http.response.start", "websocket.accept", "websocket.http.response.start", "websocket.close"}
)
#: the largest message relayed on the agents' WebSocket (the agent's own cap)
WS_MAX_MESSAGE = 64 * 1024 * 1024


class _ClientGone(Exception):
    """The client went away while its request body was being forwarded."""


class Gate:
    """``app``: the replica's Quart app; ``status``: its ``/v1/ha`` answer; ``leader``: the
    leader's (epoch, address), or None when unknown or when it is this replica."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        status: Callable[[], dict[str, Any]],
        leader: Callable[[], tuple[int, str] | None],
    ) -> None:
        self.app = app
        self.status = status
        self.leader = leader
        #: True once this replica leads and its app's lifespan has started
        self.leading = False
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(connect=3.0, read=None, write=60.0, pool=None),
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            follow_redirects=False,
            trust_env=False,
        )
        #: open proxied exchanges: their cancel scopes, by the leader epoch they reach
        self._open: dict[trio.CancelScope, int] = {}
        #: open exchanges with this replica's own app (while it leads)
        self._local: set[trio.CancelScope] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif self.leading:
            await self._serve_local(scope, receive, send)
        elif kind == "http" and scope["path"] in ("/healthz", "/v1/healthz"):
            await _answer(send, 200, b"ok", b"text/plain; charset=utf-8")
        elif kind == "http" and scope["path"] == "/v1/ha" and scope["method"] == "GET":
            await _answer(send, 200, json.dumps(self.status()).encode(), b"application/json")
        else:
            target = self.leader()
            if target is None:
                await _problem(
                    scope, send, 503, "no_leader", "no replica leads right now (a takeover is on)"
                )
            elif kind == "http":
                await self._proxy_http(scope, receive, send, *target)
            elif kind == "websocket":
                await self._proxy_ws(scope, receive, send, *target)

    def leader_changed(self, epoch: int | None) -> None:
        """The lease moved: cut every exchange with an older leader."""
        for cancel_scope, reached in list(self._open.items()):
            if epoch is None or reached != epoch:
                cancel_scope.cancel()

    def serve(self, app: ASGIApp) -> None:
        """The app of this replica's next term (its lifespan not started yet)."""
        assert not self.leading
        self.app = app

    def step_down(self) -> None:
        """This replica lost its lease: no request reaches its app any more, and every
        exchange with it is cut now."""
        self.leading = False
        for cancel_scope in list(self._local):
            cancel_scope.cancel()

    async def _serve_local(self, scope: Scope, receive: Receive, send: Send) -> None:
        answered = False

        async def tracked(message: dict[str, Any]) -> None:
            nonlocal answered
            if cancel_scope.cancel_called:
                # cut by a step-down: nothing more of the old app reaches the client (a
                # task may run on to its next checkpoint, e.g. after a read in a thread)
                await trio.lowlevel.checkpoint()
                return
            if message["type"] in _ANSWERS:
                answered = True
                # shielded: a cancel inside hypercorn's send of the answer's head would
                # leave its stream and h11 out of step (hypercorn would then fail)
                with trio.CancelScope(shield=True):
                    await send(message)
                return
            await send(message)

        with trio.CancelScope() as cancel_scope:
            self._local.add(cancel_scope)
            try:
                await self.app(scope, receive, tracked)
            finally:
                self._local.discard(cancel_scope)
        if not cancel_scope.cancel_called:
            return
        if not answered:
            await _problem(scope, send, 502, "leader_lost", LEADER_LOST)
        elif scope["type"] == "websocket":
            await _close_quietly(send, 1012, "leader changed")

    async def aclose(self) -> None:
        self.leader_changed(None)
        await self._client.aclose()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        # hypercorn's lifespan: the Quart app's own lifespan starts only when this
        # replica leads (runplane/http/replica.py drives it)
        while True:
            event = await receive()
            if event["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif event["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return

    # -- HTTP

    async def _proxy_http(
        self, scope: Scope, receive: Receive, send: Send, epoch: int, address: str
    ) -> None:
        headers = _forwarded(scope)
        has_body = any(k in (b"content-length", b"transfer-encoding") for k, _ in scope["headers"])
        request = self._client.build_request(
            scope["method"],
            _target(address, scope, "http"),
            headers=headers,
            content=_body(receive) if has_body else None,
        )
        started = False
        with trio.CancelScope() as cancel_scope:
            self._open[cancel_scope] = epoch
            try:
                response = await self._send(request, scope, send, address)
                if response is None:
                    return
                try:
                    await send(
                        {
                            "type": "http.response.start",
                            "status": response.status_code,
                            "headers": [
                                (k.lower(), v)
                                for k, v in response.headers.raw
                                if k.lower() not in HOP_BY_HOP
                            ],
                        }
                    )
                    started = True
                    await _relay(response, receive, send, has_body)
                finally:
                    with trio.CancelScope(shield=True):
                        await response.aclose()
            except _ClientGone:
                return
            except httpx.TransportError as exc:
                # the leader went away half way: the client sees the answer cut short
                log.warning("leader stream ended", extra={"address": address, "error": str(exc)})
            finally:
                del self._open[cancel_scope]
        if not started and cancel_scope.cancelled_caught:
            await _problem(scope, send, 502, "leader_lost", LEADER_LOST)

    async def _send(
        self, request: httpx.Request, scope: Scope, send: Send, address: str
    ) -> httpx.Response | None:
        """The leader's answer, streaming; None when the leader could not be reached (the
        client was answered 503 ``no_leader``, or 502 ``leader_lost``)."""
        try:
            return await self._client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            log.warning("leader unreachable", extra={"address": address, "error": repr(exc)})
            await _problem(scope, send, 503, "no_leader", "the leader did not answer; retry")
        except httpx.TransportError as exc:
            log.warning("leader lost", extra={"address": address, "error": repr(exc)})
            await _problem(scope, send, 502, "leader_lost", LEADER_LOST)
        return None

    # -- WebSocket (the agents' /v1/nodes/connect)

    async def _proxy_ws(
        self, scope: Scope, receive: Receive, send: Send, epoch: int, address: str
    ) -> None:
        first = await receive()
        if first["type"] != "websocket.connect":
            return
        headers = [(k, v) for k, v in _forwarded(scope) if k not in _WS_OWN and k not in HOP_BY_HOP]
        with trio.CancelScope() as cancel_scope:
            self._open[cancel_scope] = epoch
            try:
                async with trio_websocket.open_websocket_url(
                    _target(address, scope, "ws"),
                    subprotocols=scope.get("subprotocols") or None,
                    extra_headers=headers,
                    connect_timeout=3.0,
                    disconnect_timeout=2.0,
                    max_message_size=WS_MAX_MESSAGE,
                ) as upstream:
                    await send({"type": "websocket.accept", "subprotocol": upstream.subprotocol})
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(
                            _client_to_leader, receive, upstream, nursery.cancel_scope
                        )
                        await _leader_to_client(upstream, send)
                        nursery.cancel_scope.cancel()
            except trio_websocket.ConnectionRejected as exc:
                await _deny(send, exc.status_code, exc.body or b"")
            except (trio_websocket.HandshakeError, OSError) as exc:
                log.warning("leader unreachable", extra={"address": address, "error": repr(exc)})
                # an HTTP 503 (never a close before accept: hypercorn answers that 403,
                # which an agent takes for a refusal and stops)
                await _problem(scope, send, 503, "no_leader", "the leader did not answer; retry")
            finally:
                del self._open[cancel_scope]
        if cancel_scope.cancelled_caught:
            # the leader changed: the agent says hello again (to the new one, through us)
            await _close_quietly(send, 1012, "leader changed")


_WS_SCHEME = {"http": "ws", "https": "wss"}


def _target(address: str, scope: Scope, kind: str) -> str:
    base = urlsplit(address)
    scheme = _WS_SCHEME.get(base.scheme, "ws") if kind == "ws" else base.scheme
    query = scope.get("query_string") or b""
    path = scope.get("raw_path") or scope["path"].encode()
    return f"{scheme}://{base.netloc}{path.decode('latin-1')}" + (
        f"?{query.decode('latin-1')}" if query else ""
    )


def _forwarded(scope: Scope) -> list[tuple[bytes, bytes]]:
    headers = [(k.lower(), v) for k, v in scope["headers"] if k.lower() not in HOP_BY_HOP]
    names = {k for k, _ in headers}
    client = scope.get("client")
    if client:
        prior = next((v for k, v in headers if k == b"x-forwarded-for"), None)
        value = (prior + b", " if prior else b"") + str(client[0]).encode()
        headers = [(k, v) for k, v in headers if k != b"x-forwarded-for"]
        headers.append((b"x-forwarded-for", value))
    if b"x-forwarded-proto" not in names:
        headers.append((b"x-forwarded-proto", str(scope.get("scheme", "http")).encode()))
    host = next((v for k, v in headers if k == b"host"), None)
    if host is not None and b"x-forwarded-host" not in names:
        headers.append((b"x-forwarded-host", host))
    return headers


async def _body(receive: Receive) -> AsyncIterator[bytes]:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _ClientGone
        chunk = message.get("body", b"")
        if chunk:
            yield chunk
        if not message.get("more_body", False):
            return


async def _relay(response: httpx.Response, receive: Receive, send: Send, has_body: bool) -> None:
    """The leader's answer body to the client, chunk by chunk, until its end or the client's
    disconnect. The leader's stream breaking (it died half way) raises that transport error
    itself, not inside the nursery's exception group, so the caller's handler sees it."""
    cut: httpx.TransportError | None = None
    async with trio.open_nursery() as nursery:
        if not has_body:
            nursery.start_soon(_cancel_on_disconnect, receive, nursery.cancel_scope)
        try:
            async for chunk in response.aiter_raw():
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except httpx.TransportError as exc:
            cut = exc
        nursery.cancel_scope.cancel()
    if cut is not None:
        raise cut
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _cancel_on_disconnect(receive: Receive, cancel_scope: trio.CancelScope) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass
    cancel_scope.cancel()


async def _client_to_leader(
    receive: Receive, upstream: trio_websocket.WebSocketConnection, done: trio.CancelScope
) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            await upstream.aclose(code=message.get("code", 1000))
            done.cancel()
            return
        if message.get("text") is not None:
            await upstream.send_message(message["text"])
        elif message.get("bytes") is not None:
            await upstream.send_message(message["bytes"])


async def _leader_to_client(upstream: trio_websocket.WebSocketConnection, send: Send) -> None:
    try:
        while True:
            data = await upstream.get_message()
            key = "text" if isinstance(data, str) else "bytes"
            await send({"type": "websocket.send", key: data})
    except trio_websocket.ConnectionClosed as exc:
        code = exc.reason.code if exc.reason is not None else 1000
        reason = (exc.reason.reason or "") if exc.reason is not None else ""
        # 1005/1006 may not be sent on the wire: a leader gone without a close is 1012
        await _close_quietly(send, 1012 if code in (1005, 1006, 1015) else code, reason)


async def _close_quietly(send: Send, code: int, reason: str) -> None:
    try:
        await send({"type": "websocket.close", "code": code, "reason": reason})
    except Exception:  # the client is gone already
        log.debug("websocket close not sent", exc_info=True)


#: the 502 of a request whose leader went away before answering
LEADER_LOST = (
    "the leader went away before answering, so the request may have been carried out; "
    "retry (with the same Idempotency-Key a submit is not made twice)"
)
_PROBLEM = b"application/problem+json"
_RETRY = (b"retry-after", b"1")


async def _answer(
    send: Send, status: int, body: bytes, content_type: bytes, *extra: tuple[bytes, bytes]
) -> None:
    headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *extra]})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _problem(scope: Scope, send: Send, status: int, code: str, detail: str) -> None:
    """A problem answer with ``Retry-After: 1``: nothing was done here (``no_leader``,
    503), or the leader went away with the request (``leader_lost``, 502). A WebSocket
    handshake gets it as its HTTP refusal."""
    body = json.dumps(problem_body(status, code, detail), separators=(",", ":")).encode()
    if scope["type"] == "websocket":
        await _deny(send, status, body)
    else:
        await _answer(send, status, body, _PROBLEM, _RETRY)


async def _deny(send: Send, status: int, body: bytes) -> None:
    """Refuse a WebSocket handshake with an HTTP answer (the ASGI denial response, which
    hypercorn serves)."""
    await send(
        {
            "type": "websocket.http.response.start",
            "status": status,
            "headers": [(b"content-type", _PROBLEM), _RETRY],
        }
    )
    await send({"type": "websocket.http.response.body", "body": body, "more_body": False})
