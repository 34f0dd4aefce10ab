"""The request and answer plumbing of the test HTTP servers on loopback (webhook
receiver, git server, fake git provider): one request per connection, h11 over trio."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import h11
import trio


@dataclass(frozen=True)
class Request:
    method: str
    target: str
    headers: dict[str, str]  # lowercase names
    body: bytes


async def read_request(stream: trio.abc.Stream, conn: h11.Connection) -> Request | None:
    """The next request on ``stream``, body included (None: the peer left first)."""
    request: h11.Request | None = None
    body = bytearray()
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(65536)))
        elif isinstance(event, h11.Request):
            request = event
        elif isinstance(event, h11.Data):
            body += event.data
        elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
            break
    if request is None:
        return None
    return Request(
        request.method.decode(),
        request.target.decode(),
        {k.decode().lower(): v.decode() for k, v in request.headers},
        bytes(body),
    )


async def answer(
    stream: trio.abc.Stream,
    conn: h11.Connection,
    status: int,
    body: bytes = b"",
    headers: Sequence[tuple[str, str]] = (),
) -> None:
    head = [*headers, ("Content-Length", str(len(body))), ("Connection", "close")]
    out = bytearray(conn.send(h11.Response(status_code=status, headers=head)) or b"")
    if body:
        out += conn.send(h11.Data(data=body)) or b""
    out += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(bytes(out))
