"""The server's outgoing HTTP calls (webhook deliveries, git providers' status APIs).

One HTTP/1.1 request per connection, spoken with ``h11`` over a trio stream, to the
addresses the egress guard (:mod:`runplane.egress`) resolved and checked: the connection
goes to those exact addresses (no second DNS lookup a rebinding answer could slip
through), while ``Host`` and TLS SNI/certificate checks use the URL's name. Redirects are
not followed. The whole exchange is bounded by ``within`` seconds; at most ``BODY_CAP`` bytes of
the answer are kept (the rest is not read).
"""

from __future__ import annotations

import math
import ssl
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import h11
import trio

from runplane import __version__
from runplane.egress import Target

BODY_CAP = 64 * 1024
USER_AGENT = f"runplane/{__version__}"


class SendError(Exception):
    """No answer: the connection failed, broke, timed out, or spoke no HTTP."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: dict[str, str]  # lowercase names; the last value of a repeated header
    body: bytes


def _host_header(target: Target) -> str:
    host = f"[{target.host}]" if ":" in target.host else target.host
    default = 443 if target.scheme == "https" else 80
    return host if target.port == default else f"{host}:{target.port}"


async def _connect(addresses: Sequence[str], port: int) -> trio.SocketStream:
    last: BaseException | None = None
    for address in addresses:
        try:
            return await trio.open_tcp_stream(address, port)
        except OSError as exc:
            last = exc
    raise SendError(f"cannot connect to {', '.join(addresses)} port {port}: {last}")


async def request(
    method: str,
    target: Target,
    addresses: Sequence[str],
    *,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    within: float,
    ssl_context: ssl.SSLContext | None = None,
) -> Response:
    """Send one request to ``target`` at one of ``addresses``, all of it within ``within``
    seconds; raises :class:`SendError`."""
    try:
        with trio.fail_after(within):
            upstream = await _open(method, target, addresses, headers, body, ssl_context)
            try:
                kept = bytearray()
                async for chunk in upstream.chunks():
                    kept += chunk[: BODY_CAP - len(kept)]
                    if len(kept) >= BODY_CAP:
                        break
            finally:
                await upstream.aclose()
            return Response(upstream.status, upstream.headers, bytes(kept))
    except trio.TooSlowError:
        raise SendError(f"no answer within {within:g} s") from None
    except _NETWORK_ERRORS as exc:
        raise SendError(f"{type(exc).__name__}: {exc}") from None


async def open_stream(
    method: str,
    target: Target,
    addresses: Sequence[str],
    *,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    head_within: float,
    idle_within: float,
    ssl_context: ssl.SSLContext | None = None,
) -> Upstream:
    """Send one request and read the answer's head (within ``head_within`` seconds); the
    body is then read as it comes (:meth:`Upstream.chunks`, each read within
    ``idle_within``). The caller closes it (:meth:`Upstream.aclose`). Raises
    :class:`SendError`."""
    try:
        with trio.fail_after(head_within):
            upstream = await _open(method, target, addresses, headers, body, ssl_context)
    except trio.TooSlowError:
        raise SendError(f"no answer within {head_within:g} s") from None
    except _NETWORK_ERRORS as exc:
        raise SendError(f"{type(exc).__name__}: {exc}") from None
    upstream.idle_within = idle_within
    return upstream


_NETWORK_ERRORS = (OSError, trio.BrokenResourceError, h11.ProtocolError)


class Upstream:
    """An answer being read: ``status`` and ``headers`` known, the body to come."""

    def __init__(self, stream: trio.abc.Stream, conn: h11.Connection, answer: h11.Response) -> None:
        self._stream = stream
        self._conn = conn
        self.status = answer.status_code
        self.headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in answer.headers
        }
        self.idle_within = math.inf

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives; raises :class:`SendError` when it breaks or stalls."""
        try:
            while True:
                event = await self._next()
                if isinstance(event, h11.Data):
                    yield bytes(event.data)
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    return
        except trio.TooSlowError:
            raise SendError(f"the answer stalled for {self.idle_within:g} s") from None
        except _NETWORK_ERRORS as exc:
            raise SendError(f"{type(exc).__name__}: {exc}") from None

    async def _next(self) -> object:
        while True:
            event = self._conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            with trio.fail_after(self.idle_within):
                data = await self._stream.receive_some(65536)
            self._conn.receive_data(bytes(data))

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await self._stream.aclose()


async def _open(
    method: str,
    target: Target,
    addresses: Sequence[str],
    headers: Sequence[tuple[str, str]],
    body: bytes,
    ssl_context: ssl.SSLContext | None,
) -> Upstream:
    if not addresses:
        raise SendError(f"no address for {target.host}")
    stream: trio.abc.Stream = await _connect(addresses, target.port)
    try:
        if target.scheme == "https":
            context = ssl_context or ssl.create_default_context()
            stream = trio.SSLStream(stream, context, server_hostname=target.host)
            await stream.do_handshake()
        conn = h11.Connection(h11.CLIENT)
        head = h11.Request(
            method=method,
            target=target.path,
            headers=[
                ("Host", _host_header(target)),
                ("User-Agent", USER_AGENT),
                ("Content-Length", str(len(body))),
                ("Connection", "close"),
                *headers,
            ],
        )
        out = bytearray(conn.send(head) or b"")
        if body:
            out += conn.send(h11.Data(data=body)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        await stream.send_all(bytes(out))
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(bytes(await stream.receive_some(65536)))
            elif isinstance(event, h11.Response):
                return Upstream(stream, conn, event)
            elif isinstance(event, h11.ConnectionClosed):
                raise SendError("the connection closed before an HTTP answer")
    except BaseException:
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await stream.aclose()
        raise
