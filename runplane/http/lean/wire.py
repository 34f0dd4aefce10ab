"""An SSE follow's body chunks written one level below hypercorn's ASGI ``send``.

Measured (docs/benchmarks.md, "lean lanes: SSE"): of a follow's ~70 us per write, about
two thirds are hypercorn's path for one body chunk: ``HTTPStream.app_send`` -> a ``Body``
event -> ``H11Protocol.stream_send`` -> h11's chunked encoding -> ``TCPServer.protocol_send``
(the connection's send lock, a shielded cancel scope, ``SocketStream.send_all`` and its
checkpoints). None of it is needed while the body streams: h11 encodes a chunk without
changing its state (``ChunkedWriter.send_data``: the size in hex, the data, CRLF), and
nothing else writes to the connection while its one response is being sent.

So for a chunked HTTP/1.1 answer over plain TCP, :func:`chunk_writer` gives a writer that
encodes the chunk the way h11 does and hands it to the socket in one non-blocking
``send``, when the connection's send lock is free; whatever the kernel does not take at
once (a slow reader's full buffer), or an error, goes through ``protocol_send`` as before
(which waits, or sees the connection closed). The head and the end of the body still go
through ``send`` (hypercorn and h11 keep their state). Anything else (HTTP/1.0, TLS,
HTTP/2, the HA gate's wrapped ``send``, another hypercorn or h11 version) gets None: the
caller writes through ``send``.

Written against (and tested on) hypercorn 0.18 and h11 0.16 only (``_CHECKED``).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Awaitable, Callable
from typing import Any

import h11
import trio

#: (package, version prefix) pairs this was written against and tested on.
_CHECKED = (("hypercorn", "0.18."), ("h11", "0.16."))

Writer = Callable[[bytes], Awaitable[None]]


def supported() -> bool:
    return all(importlib.metadata.version(name).startswith(v) for name, v in _CHECKED)


_SUPPORTED = supported()


def chunk_writer(send: Any) -> Writer | None:
    """A writer of body chunks for ``send`` (hypercorn's ASGI send of a chunked HTTP/1.1
    answer over plain TCP, its head already sent), or None."""
    if not _SUPPORTED:
        return None
    from hypercorn.protocol.h11 import H11Protocol
    from hypercorn.protocol.http_stream import HTTPStream
    from hypercorn.trio.tcp_server import TCPServer

    stream = getattr(send, "__self__", None)
    if type(stream) is not HTTPStream:
        return None
    protocol = getattr(stream.send, "__self__", None)
    if type(protocol) is not H11Protocol or not isinstance(protocol.connection, h11.Connection):
        return None
    server = getattr(protocol.send, "__self__", None)
    if type(server) is not TCPServer or not isinstance(server.stream, trio.SocketStream):
        return None
    if type(getattr(protocol.connection, "_writer", None)).__name__ != "ChunkedWriter":
        return None
    return _writer(server)


def _writer(server: Any) -> Writer:
    from hypercorn.events import RawData

    sock = server.stream.socket._sock  # the non-blocking stdlib socket trio wraps
    lock: trio.Lock = server.send_lock
    protocol_send = server.protocol_send

    async def write(frame: bytes) -> None:
        if not frame:
            return  # (h11 sends nothing for an empty chunk: it would read as the end)
        data = b"%x\r\n%b\r\n" % (len(frame), frame)
        if not lock.locked():  # nobody is mid-write: this send cannot interleave
            try:
                sent = sock.send(data)
            except OSError:  # would block, or the connection broke: protocol_send's call
                sent = 0
            if sent == len(data):
                return
            data = data[sent:]
        await protocol_send(RawData(data=data))

    return write
