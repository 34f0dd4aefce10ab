"""A keep-alive connection keeps working after an answer given before the request's body
was read (#13 item 4): the real app served by hypercorn with runplane's serving config,
over real sockets, pipelined, one by one, and through httpx's pool. Before the fix the
next request on the connection never got an answer: hypercorn meant to close the
connection, but the close ran in the app's task, cancelled by then, and was cut before
it closed anything, while the connection was never recycled for a next request either
(runplane/http/serving.py says how). Now the rest of the body is dropped and the next
request is answered on the same connection, and a body too long to drop ends in a clean
close, never a hang. HANG bounds every test as a hang detector, never a timing claim.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypercorn.trio import serve

from runplane.http import serving
from runplane.http.app import create_app
from runplane.settings import load_settings

ADMIN = "keepalive-admin-token-0123456789"
HANG = 20  # seconds: a hang detector, never a timing assertion


@pytest.fixture
async def port(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[int]:
    settings = load_settings(
        {
            "RUNPLANE_DATA_DIR": str(tmp_path / "data"),
            "RUNPLANE_LOCAL_AGENT": "0",
            "RUNPLANE_ADMIN_TOKEN": ADMIN,
            "RUNPLANE_AUTH": "required",
        }
    )
    config = serving.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    stop = trio.Event()
    app: Any = create_app(settings)
    binds = await nursery.start(partial(serve, app, config, shutdown_trigger=stop.wait))
    yield int(binds[0].rsplit(":", 1)[1])
    stop.set()


def post(path: str, size: int, *, auth: bool = True) -> bytes:
    body = b'{"pad": "' + b"x" * size + b'"}'
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    if auth:
        head += f"Authorization: Bearer {ADMIN}\r\n"
    return f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body


HEALTH = b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"


def exchange(port: int, *requests: bytes) -> tuple[list[int], bool]:
    """Send ``requests`` on one connection (a thread sends while this one reads) and read
    until both answers came or the server closed; the statuses, and whether it closed."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.settimeout(HANG)

    def send() -> None:
        try:
            for request in requests:
                sock.sendall(request)
        except OSError:
            pass  # the server closed: what was answered is read below

    sender = threading.Thread(target=send)
    sender.start()
    data, closed = b"", False
    try:
        while len(re.findall(rb"HTTP/1.1 \d{3}", data)) < len(requests):
            chunk = sock.recv(65536)
            if not chunk:
                closed = True
                break
            data += chunk
    except ConnectionResetError:
        closed = True
    finally:
        sender.join()
        sock.close()
    return [int(s) for s in re.findall(rb"HTTP/1.1 (\d{3})", data)], closed


CASES = [
    (post("/v1/jobs/job_unknown/cancel", 300_000), 404),
    (post("/v1/jobs/job_unknown/cancel", 2_000_000), 404),
    (post("/v1/jobs/job_unknown/cancel", 300_000, auth=False), 401),
    (post("/v1/jobs/job_unknown/cancel", 2_000_000, auth=False), 401),
    (post("/v1/jobs", 2_000_000), 413),
]


@pytest.mark.parametrize(
    ("first", "status"),
    CASES,
    ids=["404-300k", "404-2M", "401-300k", "401-2M", "413-2M"],
)
async def test_the_next_request_on_the_connection_is_answered(
    port: int, first: bytes, status: int
) -> None:
    with trio.fail_after(HANG * 2):
        statuses, _ = await trio.to_thread.run_sync(exchange, port, first, HEALTH)
    assert statuses == [status, 200]


def one_by_one(port: int, first: bytes) -> list[int]:
    """Send ``first`` whole, read its answer, then send a GET on the same connection (as a
    client without pipelining does); the two statuses (a closed connection fails)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.settimeout(HANG)
        sock.sendall(first)  # the server drops what the route did not read, so this ends
        reader = sock.makefile("rb")
        statuses: list[int] = []
        for request in (None, HEALTH):
            if request is not None:
                sock.sendall(request)
            status_line = reader.readline()
            assert status_line, "the server closed the connection"
            status = int(status_line.split()[1])
            length = 0
            while (line := reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
            statuses.append(status)
        return statuses


@pytest.mark.parametrize(
    ("first", "status"),
    CASES,
    ids=["404-300k", "404-2M", "401-300k", "401-2M", "413-2M"],
)
async def test_the_next_request_after_the_answer_is_answered(
    port: int, first: bytes, status: int
) -> None:
    with trio.fail_after(HANG * 2):
        answers = await trio.to_thread.run_sync(one_by_one, port, first)
    assert answers == [status, 200]


async def test_a_body_too_long_to_drop_is_answered_then_closed(port: int) -> None:
    huge = post("/v1/jobs/job_unknown/cancel", serving.DISCARD_MAX + 1_000_000)
    with trio.fail_after(HANG * 2):
        statuses, closed = await trio.to_thread.run_sync(exchange, port, huge, HEALTH)
    assert statuses[:1] == [404] and closed


@pytest.mark.parametrize(
    ("path", "size", "auth", "status"),
    [
        ("/v1/jobs/job_unknown/cancel", 300_000, True, 404),
        ("/v1/jobs/job_unknown/cancel", 2_000_000, True, 404),
        ("/v1/jobs/job_unknown/cancel", 2_000_000, False, 401),
        ("/v1/jobs", 2_000_000, True, 413),
    ],
    ids=["404-300k", "404-2M", "401-2M", "413-2M"],
)
async def test_a_pooled_client_keeps_going(
    port: int, path: str, size: int, auth: bool, status: int
) -> None:
    """httpx with its pool: every request is answered, on one connection throughout."""
    headers = {"Authorization": f"Bearer {ADMIN}"} if auth else {}
    local_ports: set[int] = set()
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=HANG) as client:
        with trio.fail_after(HANG * 2):  # a hang detector
            for _ in range(3):
                early = await client.post(
                    path,
                    content=b"x" * size,
                    headers={**headers, "Content-Type": "application/json"},
                )
                assert early.status_code == status
                health = await client.get("/healthz")
                assert health.status_code == 200
                for response in (early, health):
                    stream = response.extensions["network_stream"]
                    local_ports.add(stream.get_extra_info("client_addr")[1])
    assert len(local_ports) == 1  # kept, not closed and retried on a new connection
