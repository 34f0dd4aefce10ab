"""A keep-alive connection keeps working after an answer given before the request's body
was read (#13 item 4): the real app served by hypercorn with runplane's serving config,
over real sockets. Before the fix the next request on the connection never got an
answer (hypercorn's close ran in the app's cancelled task and was cancelled half way);
now the rest of the body is dropped and the next request is answered on the same
connection, and a body too long to drop ends in a clean close, never a hang.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import AsyncIterator
from pathlib import Path

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
    binds = await nursery.start(partial_serve(create_app(settings), config, stop))
    yield int(binds[0].rsplit(":", 1)[1])
    stop.set()


def partial_serve(app: object, config: serving.Config, stop: trio.Event) -> object:
    async def run(task_status: trio.TaskStatus[list[str]]) -> None:
        await serve(app, config, shutdown_trigger=stop.wait, task_status=task_status)  # type: ignore[arg-type]

    return run


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


async def test_a_body_too_long_to_drop_is_answered_then_closed(port: int) -> None:
    huge = post("/v1/jobs/job_unknown/cancel", serving.DISCARD_MAX + 1_000_000)
    with trio.fail_after(HANG * 2):
        statuses, closed = await trio.to_thread.run_sync(exchange, port, huge, HEALTH)
    assert statuses[:1] == [404] and closed


async def test_a_pooled_client_keeps_going(port: int) -> None:
    headers = {"Authorization": f"Bearer {ADMIN}"}
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=HANG
    ) as client:
        for _ in range(3):
            missing = await client.post(
                "/v1/jobs/job_unknown/cancel",
                content=b"x" * 300_000,
                headers={"Content-Type": "application/json"},
            )
            assert missing.status_code == 404
            assert (await client.get("/healthz")).status_code == 200
