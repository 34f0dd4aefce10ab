"""The server's outgoing HTTP calls (webhook deliveries, git providers' status APIs).

One HTTP/1.1 request per connection, spoken with ``h11`` over a trio stream, to the
addresses the egress guard (:mod:`runplane.egress`) resolved and checked: the connection
goes to those exact addresses (no second DNS lookup a rebinding answer could slip
through), while ``Host`` and TLS SNI/certificate checks use the URL's name. Redirects are
not followed. The whole exchange is bounded by ``within`` seconds; at most ``BODY_CAP`` bytes of
the answer are kept (the rest is not read).
"""

from __future__ import annotations

import ssl
from collections.abc import Sequence
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
    if not addresses:
        raise SendError(f"no address for {target.host}")
    try:
        with trio.fail_after(within):
            return await _exchange(method, target, addresses, headers, body, ssl_context)
    except trio.TooSlowError:
        raise SendError(f"no answer within {within:g} s") from None
    except (OSError, trio.BrokenResourceError, h11.ProtocolError) as exc:
        raise SendError(f"{type(exc).__name__}: {exc}") from None


async def _exchange(
    method: str,
    target: Target,
    addresses: Sequence[str],
    headers: Sequence[tuple[str, str]],
    body: bytes,
    ssl_context: ssl.SSLContext | None,
) -> Response:
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
        return await _read_response(conn, stream)
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            await stream.aclose()


async def _read_response(conn: h11.Connection, stream: trio.abc.Stream) -> Response:
    answer: h11.Response | None = None
    kept = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(65536)))
        elif isinstance(event, h11.Response):
            answer = event
        elif isinstance(event, h11.Data):
            kept += event.data[: BODY_CAP - len(kept)]
            if len(kept) >= BODY_CAP:
                break
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    if answer is None:
        raise SendError("the connection closed before an HTTP answer")
    heads = {
        name.decode("latin-1").lower(): value.decode("latin-1") for name, value in answer.headers
    }
    return Response(answer.status_code, heads, bytes(kept))
