"""A follower replica's gate relaying a streamed answer (an SSE follow) from a leader that
dies half way: the client's answer is cut short and the gate logs ``leader stream ended``
(a warning), never an unhandled error. Found by ``bench chaos`` (SIGKILL of the leader
under log followers): the transport error came out of the relay's nursery wrapped in an
exception group, past the gate's handler, and hypercorn logged "Error in ASGI Framework".

The leader here is a raw TCP server that sends a chunked answer's head and first chunk,
then closes the connection (what a killed process's kernel does)."""

from __future__ import annotations

import logging
from functools import partial
from typing import Any

import pytest
import trio

from runplane.http.gate import Gate

HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
FIRST = b"data: one\n\n"


async def _dying_leader(stream: trio.SocketStream) -> None:
    await stream.receive_some()  # the request
    await stream.send_all(HEAD + b"%x\r\n" % len(FIRST) + FIRST + b"\r\n")
    await stream.aclose()  # no last chunk: the answer breaks off


async def _never_disconnects() -> dict[str, Any]:
    await trio.sleep_forever()
    raise AssertionError


async def test_a_leader_dying_mid_stream_cuts_the_answer_without_an_unhandled_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, _dying_leader, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]

        async def app(scope: Any, receive: Any, send: Any) -> None:
            raise AssertionError("a follower does not serve")

        gate = Gate(app, status=dict, leader=lambda: (1, f"http://127.0.0.1:{port}"))
        sent: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {
            "type": "http",
            "method": "GET",
            "path": "/v1/jobs/job_1/events",
            "raw_path": b"/v1/jobs/job_1/events",
            "query_string": b"",
            "headers": [(b"host", b"replica")],
            "client": ("127.0.0.1", 5000),
            "scheme": "http",
        }
        with caplog.at_level(logging.WARNING, logger="runplane"), trio.fail_after(10):
            await gate(scope, _never_disconnects, send)
        await gate.aclose()
        nursery.cancel_scope.cancel()
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 200
    body = b"".join(m.get("body", b"") for m in sent[1:])
    assert body == FIRST
    # cut short: the answer never says it is complete
    assert all(m.get("more_body", True) for m in sent[1:]), sent
    assert any(r.getMessage() == "leader stream ended" for r in caplog.records), caplog.records
