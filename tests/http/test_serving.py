"""runplane.http.serving: hypercorn's trio worker with one write per response, checked over
real sockets (responses, keep-alive, streaming, HEAD, idle close, a body the app never
read). The real app's early answers over keep-alive: tests/http/test_keepalive.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from functools import partial
from typing import Any

import pytest
import trio
from hypercorn.protocol import h11 as hypercorn_h11
from hypercorn.trio import serve
from hypercorn.trio import tcp_server as hypercorn_tcp

from runplane.http import serving


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    assert scope["type"] == "http"
    if scope["path"] == "/stream":  # no content-length: headers must go out at once
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await scope["state"]["release"].wait()
        await send({"type": "http.response.body", "body": b"late", "more_body": False})
        return
    body = scope["path"].encode()
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


class Served:
    def __init__(self, port: int, release: trio.Event) -> None:
        self.port = port
        self.release = release


@pytest.fixture
async def served() -> AsyncIterator[Served]:
    config = serving.Config()
    config.bind = ["127.0.0.1:0"]
    config.keep_alive_timeout = 0.5
    config.accesslog = None
    release = trio.Event()

    async def with_state(scope: dict[str, Any], receive: Any, send: Any) -> None:
        scope.setdefault("state", {})["release"] = release
        await app(scope, receive, send)

    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, with_state, config, shutdown_trigger=stop.wait))
        yield Served(int(binds[0].rsplit(":", 1)[1]), release)
        release.set()
        stop.set()


async def _response(stream: trio.SocketStream, buf: bytearray) -> bytes:
    """Read one content-length response off the stream."""
    while True:
        head_end = buf.find(b"\r\n\r\n")
        if head_end >= 0:
            head = bytes(buf[:head_end]).lower()
            length = int(head.split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
            total = head_end + 4 + length
            if len(buf) >= total:
                out = bytes(buf[:total])
                del buf[:total]
                return out
        data = await stream.receive_some(65536)
        assert data, "connection closed mid-response"
        buf += data


def test_installed_on_this_hypercorn() -> None:
    serving.Config()
    assert serving.installed()
    assert hypercorn_h11.H11Protocol._send_h11_event is serving._send_h11_event
    assert hypercorn_h11.H11Protocol._maybe_recycle is serving._maybe_recycle
    assert hypercorn_tcp.TCPServer._close is serving._close


def test_only_checked_versions() -> None:
    assert serving.supported("0.18.0")
    assert not serving.supported("0.17.3")
    assert not serving.supported("0.19.0")
    assert not serving.supported("1.0.0")


async def test_keep_alive_responses_one_write_each(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[bytes] = []
    original = hypercorn_tcp.TCPServer.protocol_send

    async def counting(self: Any, event: Any) -> None:
        if type(event).__name__ == "RawData":
            writes.append(event.data)
        await original(self, event)

    monkeypatch.setattr(hypercorn_tcp.TCPServer, "protocol_send", counting)
    stream = await trio.open_tcp_stream("127.0.0.1", served.port)
    buf = bytearray()
    for path in ("/a", "/bb", "/ccc"):
        await stream.send_all(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        response = await _response(stream, buf)
        assert response.startswith(b"HTTP/1.1 200")
        assert response.endswith(b"\r\n\r\n" + path.encode())
    await stream.aclose()
    # head + body + end of message of each response went out as one write, none empty
    assert len(writes) == 3
    assert all(w.startswith(b"HTTP/1.1 200") for w in writes)


async def test_head_request_gets_its_head(served: Served) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", served.port)
    await stream.send_all(b"HEAD /abc HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    with trio.fail_after(5):
        while b"\r\n\r\n" not in data:
            data += await stream.receive_some(65536)
    assert data.startswith(b"HTTP/1.1 200")
    assert b"content-length: 4" in data.lower()
    assert data.endswith(b"\r\n\r\n")  # no body
    await stream.aclose()


async def test_streaming_headers_are_not_held(served: Served) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", served.port)
    await stream.send_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    with trio.fail_after(5):
        head = await stream.receive_some(65536)
    assert head.startswith(b"HTTP/1.1 200")  # before the app sent any body
    assert b"late" not in head
    served.release.set()
    rest = b""
    with trio.fail_after(5):
        while not rest.endswith(b"0\r\n\r\n"):
            rest += await stream.receive_some(65536)
    assert b"late" in rest
    await stream.aclose()


async def test_idle_connection_closed_after_keep_alive_timeout(served: Served) -> None:
    stream = await trio.open_tcp_stream("127.0.0.1", served.port)
    buf = bytearray()
    await stream.send_all(b"GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
    await _response(stream, buf)
    with trio.fail_after(5):  # keep_alive_timeout is 0.5 s
        assert await stream.receive_some(65536) == b""
    await stream.aclose()


async def test_busy_connection_is_not_timed_out(served: Served) -> None:
    """The idle timer stops while a request is in flight (the app waits past the timeout)."""
    stream = await trio.open_tcp_stream("127.0.0.1", served.port)
    await stream.send_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    await stream.receive_some(65536)
    await trio.sleep(1.0)  # twice the keep-alive timeout
    served.release.set()
    rest = b""
    with trio.fail_after(5):
        while not rest.endswith(b"0\r\n\r\n"):
            rest += await stream.receive_some(65536)
    assert b"late" in rest
    await stream.aclose()


async def test_an_unread_body_is_dropped_and_the_connection_kept(served: Served) -> None:
    """The app answers without reading the body: the rest of it is dropped and the next
    request on the same connection is answered (upstream closed the connection)."""
    stream = await trio.open_tcp_stream("127.0.0.1", served.port)
    body = b"x" * 300_000
    buf = bytearray()
    with trio.fail_after(10):  # a hang detector
        async with trio.open_nursery() as nursery:
            head = f"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
            nursery.start_soon(stream.send_all, head.encode() + body)
            assert (await _response(stream, buf)).endswith(b"\r\n\r\n/early")
        await stream.send_all(b"GET /next HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await _response(stream, buf)).endswith(b"\r\n\r\n/next")
    await stream.aclose()


async def test_a_stalled_unread_body_is_closed_like_an_idle_connection(served: Served) -> None:
    """The client stops sending the rest of a body the app did not read: the connection is
    closed after the keep-alive timeout (0.5 s here) instead of holding its descriptor."""
    stream = await trio.open_tcp_stream("127.0.0.1", served.port)
    await stream.send_all(b"POST /early HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\nxx")
    buf = bytearray()
    with trio.fail_after(10):  # a hang detector
        assert (await _response(stream, buf)).startswith(b"HTTP/1.1 200")
        await stream.send_all(b"x" * 1000)  # progress restarts the timer; then nothing
        while await stream.receive_some(65536):
            pass
    await stream.aclose()
