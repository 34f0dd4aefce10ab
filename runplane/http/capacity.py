"""Open files at the limit: new connections are answered at once instead of left to hang.

(The limit itself is raised at start: :mod:`runplane.fdlimit`.)

When ``accept`` fails with ``EMFILE``/``ENFILE``, trio's accept loop
(``trio.serve_listeners``, which hypercorn's trio worker runs) logs the error with a
traceback and retries every 100 ms, while new connections, ``/healthz`` too, wait in the
kernel's backlog: clients hang, and the log grows by ten tracebacks a second. Here
``trio.SocketListener.accept`` (wrapped once per process by :func:`install`, calling
trio's own) sheds instead: it closes a spare descriptor kept for this, accepts the waiting
connection with it, answers ``503`` with ``Retry-After`` and ``Connection: close``, closes
it and takes the spare again. ``ENOMEM``/``ENOBUFS`` (no room to accept at all) wait
``RETRY_SEC`` and retry. Each condition is logged once per ``LOG_EVERY`` seconds with the
number of connections shed, never a traceback per accept. The connections already open
are served as usual.
"""

from __future__ import annotations

# The idna codec is imported on first use (werkzeug's ``Map.bind`` encodes the host with
# it, first request): at the open-file limit that import fails with EMFILE, and every
# request with it (a 500). Imported here, while descriptors are free.
import encodings.idna  # noqa: F401
import errno
import logging
import os
import resource
import time
from typing import Any

import trio

log = logging.getLogger("runplane.http")

#: The "out of descriptors" condition is logged at most once per this many seconds.
LOG_EVERY = 10.0
#: How long a shed connection's request may take to arrive before the answer (seconds):
#: what already arrived is read first, so the close does not reset the connection before
#: the client reads the answer; short, as idle connections in the backlog wait their turn.
SHED_READ_SEC = 0.005
#: When no spare descriptor could be kept, wait this long before accepting again.
RETRY_SEC = 0.1
_FULL = frozenset({errno.EMFILE, errno.ENFILE})  # a spare descriptor makes room
_NO_ROOM = frozenset({errno.ENOMEM, errno.ENOBUFS})  # nothing to make room with: wait
_SHED_BODY = (
    b'{"type":"https://runplane.dev/problems/overloaded","title":"Service Unavailable",'
    b'"status":503,"code":"overloaded","detail":"the server is at its open-file limit; '
    b'retry shortly"}'
)
SHED_RESPONSE = (
    b"HTTP/1.1 503 Service Unavailable\r\n"
    b"Content-Type: application/problem+json\r\n"
    b"Retry-After: 1\r\n"
    b"Connection: close\r\n"
    b"Content-Length: " + str(len(_SHED_BODY)).encode() + b"\r\n\r\n" + _SHED_BODY
)


class _Shedding:
    """The spare descriptor and the log's pacing (one per process)."""

    def __init__(self) -> None:
        self.spare: int | None = None
        self.shed = 0
        self.refused = 0
        self.last_log = float("-inf")

    def take_spare(self) -> None:
        if self.spare is None:
            try:
                self.spare = os.open(os.devnull, os.O_RDONLY)
            except OSError:
                self.spare = None

    def note(self, code: int) -> None:
        now = time.monotonic()
        if now - self.last_log < LOG_EVERY:
            return
        self.last_log = now
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        log.warning(
            "out of file descriptors: new connections are answered 503 and closed"
            if code in _FULL
            else "no memory to accept connections: retrying",
            extra={
                "errno": errno.errorcode.get(code, str(code)),
                "open_file_limit": soft,
                "shed": self.shed,
                "not_accepted": self.refused,
                "every_sec": LOG_EVERY,
            },
        )
        self.shed = self.refused = 0


_state = _Shedding()
_upstream_accept: Any = None


def install() -> None:
    """Wrap ``trio.SocketListener.accept`` (once) and take the spare descriptor."""
    global _upstream_accept
    _state.take_spare()
    if _upstream_accept is None:
        _upstream_accept = trio.SocketListener.accept
        trio.SocketListener.accept = _accept  # type: ignore[method-assign]


async def _accept(self: trio.SocketListener) -> trio.SocketStream:
    while True:
        try:
            stream: trio.SocketStream = await _upstream_accept(self)
            return stream
        except OSError as exc:
            if exc.errno in _FULL:
                await _shed_one(self.socket)
            elif exc.errno in _NO_ROOM:
                _state.refused += 1
                await trio.sleep(RETRY_SEC)
            else:
                raise
            _state.note(exc.errno)


async def _shed_one(listener: trio.socket.SocketType) -> None:
    """Answer one waiting connection 503 with the spare descriptor's room."""
    if _state.spare is None:
        _state.refused += 1
        _state.take_spare()
        await trio.sleep(RETRY_SEC)
        return
    os.close(_state.spare)
    _state.spare = None
    try:
        with trio.move_on_after(RETRY_SEC):
            conn, _ = await listener.accept()
            with conn:
                with trio.move_on_after(SHED_READ_SEC):
                    await conn.recv(65536)
                try:
                    await conn.send(SHED_RESPONSE)
                    conn.shutdown(trio.socket.SHUT_WR)
                except OSError:
                    pass
            _state.shed += 1
    except OSError:
        _state.refused += 1
        await trio.sleep(RETRY_SEC)
    finally:
        _state.take_spare()
