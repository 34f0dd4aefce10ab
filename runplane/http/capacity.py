"""Open files at the limit: the server raises its own limit at start, and at the limit
answers new connections at once instead of leaving them to hang.

**The limit.** :func:`raise_open_file_limit` lifts the soft ``RLIMIT_NOFILE`` to the hard
one (capped at ``NOFILE_CAP``), as nginx's ``worker_rlimit_nofile`` or systemd's
``LimitNOFILE`` would: every connection holds a descriptor, and the common default soft
limit of 1,024 stopped the server at about 1,000 connections.

**At the limit.** When ``accept`` fails with ``EMFILE``/``ENFILE``, trio's accept loop
(``trio.serve_listeners``) logs the error with a traceback and retries every 100 ms,
while new connections, ``/healthz`` too, wait in the kernel's backlog: clients hang, and
the log grows by ten tracebacks a second. Here ``trio.SocketListener.accept`` (wrapped
once per process by :func:`install`, calling trio's own) sheds instead: it closes a spare
descriptor kept for this, accepts the waiting connection with it, answers ``503`` with
``Retry-After`` and ``Connection: close``, closes it and takes the spare again; the
condition is logged once per ``LOG_EVERY`` seconds with the number of connections shed,
never a traceback per accept. The connections already open are served as usual.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import time
from typing import Any

import trio

log = logging.getLogger("runplane.http")

#: The soft limit is raised to the hard one, but no higher than this.
NOFILE_CAP = 1_048_576
#: The "out of descriptors" condition is logged at most once per this many seconds.
LOG_EVERY = 10.0
#: How long a shed connection's request may take to arrive before the answer (seconds):
#: what already arrived is read first, so the close does not reset the connection before
#: the client reads the answer; short, as idle connections in the backlog wait their turn.
SHED_READ_SEC = 0.005
#: When no spare descriptor could be kept, wait this long before accepting again.
RETRY_SEC = 0.1
_FULL = frozenset({errno.EMFILE, errno.ENFILE})
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


def raise_open_file_limit() -> tuple[int, int]:
    """Raise the soft open-file limit to the hard one (capped); (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = NOFILE_CAP if hard == resource.RLIM_INFINITY else min(hard, NOFILE_CAP)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit", extra={"error": str(exc)})
            return soft, soft
        return soft, target
    return soft, soft


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
            "out of file descriptors: new connections are answered 503 and closed",
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
            if exc.errno not in _FULL:
                raise
            await _shed_one(self.socket)
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
