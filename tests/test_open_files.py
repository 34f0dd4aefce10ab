"""The server at its open-file limit (#13 item 5), as a real process with a low limit.

Before: the soft limit stayed at its default (1,024 stops the server near 1,000
connections); at the limit a new connection, ``/healthz`` too, hung in the backlog until
a descriptor freed, while the log took a traceback ten times a second. Now the soft limit
is raised to the hard one at start (logged), a connection arriving at the limit is
answered 503 with ``Retry-After`` and closed at once, and the condition is logged once
per interval without a traceback. ``runplane agent`` raises its limit at start too.
"""

from __future__ import annotations

import json
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from tests.test_cli import Server

LIMIT = 128
HANG = 20.0  # seconds: a hang detector, never a timing assertion


def _limit(soft: int, hard: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return apply


def _healthz(port: int) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=HANG) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer


def test_the_soft_limit_is_raised_to_the_hard_one() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(hard, 4096)
    code = (
        "from runplane.fdlimit import raise_open_file_limit; "
        "import resource; print(raise_open_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=_limit(256, target),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == f"(256, {target}) ({target}, {target})"


def test_a_soft_limit_at_the_hard_one_is_left_alone() -> None:
    code = "from runplane.fdlimit import raise_open_file_limit; print(raise_open_file_limit())"
    out = subprocess.run(
        [sys.executable, "-c", code],
        preexec_fn=_limit(200, 200),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == "(200, 200)"


def test_the_agent_raises_its_limit_at_start(tmp_path: Path) -> None:
    """``runplane agent`` logs the figures once at start (no server needed for that)."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = min(hard, 4096)
    args = ["--server", "http://127.0.0.1:9", "--data-dir", str(tmp_path / "agent")]
    args += ["--work-dir", str(tmp_path / "work"), "--run-as", "root"]  # nothing outside tmp
    log = tmp_path / "agent.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runplane", "agent", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            preexec_fn=_limit(256, target),
        )
    try:
        deadline = time.monotonic() + HANG
        while not (start := _line(log, "open-file limit")):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=HANG)
    assert (start["soft_before"], start["soft"], start["hard"]) == (256, target, target)


def _line(log: Path, msg: str) -> dict[str, Any] | None:
    for line in log.read_text().splitlines():
        if line.startswith("{") and (record := json.loads(line))["msg"] == msg:
            return cast(dict[str, Any], record)
    return None


#: What each held connection sends: a request whose body never comes, so the connection
#: stays busy (not idle: the keep-alive timeout does not free it) until the test closes it.
BUSY = (
    b"POST /v1/jobs HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    b"Content-Length: 100\r\n\r\n{"
)


def test_at_the_limit_new_connections_get_503_and_one_log_line(tmp_path: Path) -> None:
    server = Server(tmp_path / "data", tmp_path / "server.log", preexec=_limit(LIMIT, LIMIT))
    held: list[socket.socket] = []
    try:
        # more connections than descriptors: the kernel queues the rest in the backlog
        for _ in range(LIMIT + 40):
            held.append(socket.create_connection(("127.0.0.1", server.port), timeout=HANG))
            held[-1].sendall(BUSY)
        answers = [_healthz(server.port) for _ in range(5)]
        assert all(a.startswith(b"HTTP/1.1 503 ") for a in answers), answers
        assert b"Retry-After: 1" in answers[0] and b"Connection: close" in answers[0]
        for sock in held:
            sock.close()
        held.clear()
        # the server sees the closes in its own time: serving again once it has
        deadline = time.monotonic() + HANG
        while not _healthz(server.port).startswith(b"HTTP/1.1 200 "):
            assert time.monotonic() < deadline, "not serving after the connections closed"
            time.sleep(0.05)
    finally:
        for sock in held:
            sock.close()
        assert server.terminate() == 0
    lines = server.lines()
    start = next(line for line in lines if line["msg"] == "open-file limit")
    assert (start["soft_before"], start["soft"]) == (LIMIT, LIMIT)  # soft == hard: as it was
    full = [line for line in lines if "out of file descriptors" in str(line["msg"])]
    assert 1 <= len(full) <= 3, full  # once per 10 s, not per accept
    assert full[0]["errno"] == "EMFILE"
    assert "Traceback" not in server.log.read_text()  # not per accept, nor per request
    assert "Too many open files" not in server.log.read_text()


def test_the_first_request_needs_no_descriptor_for_an_import() -> None:
    """werkzeug encodes the host with the idna codec, imported on first use: when the
    first request came at the limit, that import failed (EMFILE) and every request was a
    500. Serving imports it at start. (The test above warms it with its first /healthz.)"""
    code = (
        "import sys; from runplane.http import serving; serving.Config(); "
        "print('encodings.idna' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "True"
