"""hypercorn's trio worker, tuned for runplane: the Config ``runplane serve`` builds.

``Config()`` here is hypercorn's ``Config`` that, when built, installs one small fix to
hypercorn's per-request work on HTTP/1.1 (measured in docs/benchmarks.md):

**One write per response instead of two or three.** Upstream
``hypercorn/protocol/h11.py:H11Protocol._send_h11_event`` (0.18) writes the status line +
headers, each body chunk, and the end of the message as separate ``send_all`` calls, each
through ``hypercorn/trio/tcp_server.py:TCPServer.protocol_send`` (the connection's send
lock, a shielded cancel scope, a ``send`` syscall); the end of a Content-Length message
is an empty write. Here, when the response has a ``content-length`` (a complete body,
never a stream such as SSE), the head is held and sent together with the first body
chunk or the end of the message, and empty writes are skipped. Streaming responses (no
content-length) are sent exactly as upstream does, so SSE headers still go out at once.

**A request answered before its body was read keeps its connection working.** A route
may answer without reading the body (404 for an unknown job, 401, 413 on Content-Length).
Upstream (0.18), ``H11Protocol._maybe_recycle`` then sees the client still sending the
body (h11 ``their_state`` ``SEND_BODY``) and sends ``Closed`` to close the connection,
but it does so from the app's task, which quart-trio has already cancelled: the close is
cancelled at its first checkpoint (``TCPServer._close``: before ``shutdown``/``close``),
so the socket stays open with nobody reading requests on it, and the next request on a
keep-alive connection never gets an answer (a client with a connection pool hangs).
(The cancel comes from that same call: it first tells the app ``http.disconnect``, on
which quart-trio's message reader returns and cancels the request's nursery, the app's
task included.) Nor is the connection recycled: the reader, with no stream to hand the
rest of the body to, stops parsing at each body chunk (``_handle_events``: ``stream is
None: break``), so what the client already sent (the body's end, the next request) lies
unparsed until more bytes arrive, which never happens while the client waits for its
answer; and even parsed, the next request would meet h11 ``PAUSED`` (``start_next_cycle``
is only called when both sides are ``DONE`` at the response's end), the reader waiting on
``can_read`` for good. Here the rest of the body
is read and dropped (up to ``DISCARD_MAX`` bytes) and the connection then serves the next
request as usual; a longer leftover closes the connection, and every close runs
shielded, so it is never cancelled half way. While the body is dropped the connection's
keep-alive timer runs, restarted by each chunk: a client that stops sending for
``keep_alive_timeout`` is closed like an idle connection, and never holds its descriptor.

Building a Config also installs ``capacity.py``'s answer at the open-file limit.

The hypercorn fixes are installed once per process, only on the hypercorn version they
were written against and tested on (``_CHECKED``); on any other version they are skipped
with a warning and ``installed()`` says so, so an upgrade never runs a patch written for
other internals.
"""

from __future__ import annotations

import importlib.metadata
import logging
from typing import Any

import h11
import trio
from hypercorn.config import Config as _HypercornConfig

from . import capacity

log = logging.getLogger("runplane.http")

#: Most bytes of an early-answered request's body read and dropped to keep the connection;
#: past it the connection is closed (the client sees the answer, then the close).
DISCARD_MAX = 8 * 1024 * 1024

#: hypercorn versions whose internals the fix below was written against and tested on.
_CHECKED = ("0.18.",)
_installed: bool | None = None


class Config(_HypercornConfig):
    """hypercorn's Config; building one installs the serving fix (once per process)."""

    def __init__(self) -> None:
        super().__init__()
        install()


def supported(version: str) -> bool:
    """Whether the fix was written for (and tested on) this hypercorn version."""
    return version.startswith(_CHECKED)


def installed() -> bool:
    """True when the fix is active in this process."""
    return bool(_installed)


def install() -> bool:
    """Install the fix if this hypercorn is the checked version; idempotent."""
    global _installed
    if _installed is not None:
        return _installed
    capacity.install()  # at the open-file limit: answer 503, never hang (trio's, any version)
    version = importlib.metadata.version("hypercorn")
    if not supported(version):
        log.warning(
            "hypercorn serving fix skipped", extra={"hypercorn": version, "checked": _CHECKED}
        )
        _installed = False
        return False
    from hypercorn.protocol import h11 as h11_protocol
    from hypercorn.trio import tcp_server

    global _upstream_recycle, _upstream_close
    protocol, server = h11_protocol.H11Protocol, tcp_server.TCPServer
    _upstream_recycle, _upstream_close = protocol._maybe_recycle, server._close
    protocol._send_h11_event = _send_h11_event  # type: ignore[method-assign]
    protocol._maybe_recycle = _maybe_recycle  # type: ignore[method-assign]
    server._close = _close  # type: ignore[method-assign]
    _installed = True
    return True


# -- one write per response -----------------------------------------------------------------


def _has_content_length(event: h11.Response) -> bool:
    return any(name == b"content-length" for name, _ in event.headers)


async def _send_h11_event(self: Any, event: Any) -> None:
    """Replaces ``hypercorn.protocol.h11.H11Protocol._send_h11_event`` (same errors)."""
    from hypercorn.events import RawData

    try:
        data = self.connection.send(event)
    except h11.LocalProtocolError:
        if self.connection.their_state != h11.ERROR:
            raise
        return
    if type(event) is h11.Response and _has_content_length(event):
        self._runplane_head = data  # sent with the body (or the end of the message)
        return
    head = self.__dict__.pop("_runplane_head", None)
    if head is not None:
        data = head + data
    if data:
        await self.send(RawData(data=data))


# -- an early answer keeps the connection ---------------------------------------------------

_upstream_recycle: Any = None
_upstream_close: Any = None


async def _close(self: Any) -> None:
    """Replaces ``hypercorn.trio.tcp_server.TCPServer._close``: the same close, shielded
    (it is called from the app's task, which may be cancelled already)."""
    with trio.CancelScope(shield=True):
        await _upstream_close(self)


async def _maybe_recycle(self: Any) -> None:
    """Replaces ``hypercorn.protocol.h11.H11Protocol._maybe_recycle``: a response sent
    while the client still sends the request's body leaves a :class:`_Discard` in the
    stream's place to read the rest; anything else is upstream's (recycle or close)."""
    from hypercorn.events import Updated

    with trio.CancelScope(shield=True):  # called from the app's (cancelled) task
        await self._close_stream()
        connection = self.connection
        if (
            isinstance(connection, h11.Connection)
            and not self.context.terminated.is_set()
            and connection.our_state is h11.DONE
            and connection.their_state is h11.SEND_BODY
        ):
            self.stream = _Discard(self)
            await self.send(Updated(idle=True))  # the keep-alive timer runs while dropping
            await self.can_read.set()  # as upstream does on each way out
            return
        await _upstream_recycle(self)


class _Discard:
    """Stands in for the finished stream while the rest of an early-answered request's
    body arrives: drops it, and at its end has the connection recycled for the next
    request (both sides are then done). Past ``DISCARD_MAX`` bytes it closes instead."""

    def __init__(self, protocol: Any) -> None:
        self.protocol = protocol
        self.dropped = 0

    async def handle(self, event: Any) -> None:
        from hypercorn.events import Closed, Updated
        from hypercorn.protocol.events import Body, EndBody

        if isinstance(event, Body):
            self.dropped += len(event.data)
            if self.dropped > DISCARD_MAX:
                self.protocol.stream = None
                await self.protocol.send(Closed())
            else:  # the keep-alive timer, from this chunk on: a stalled client is closed
                await self.protocol.send(Updated(idle=True))
        elif isinstance(event, EndBody):
            self.protocol.stream = None
            await _upstream_recycle(self.protocol)  # both sides done: the next cycle
