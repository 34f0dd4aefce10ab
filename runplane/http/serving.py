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

It is installed once per process, only on the hypercorn version it was written against
and tested on (``_CHECKED``); on any other version it is skipped with a warning and
``installed()`` says so, so an upgrade never runs a patch written for other internals.
"""

from __future__ import annotations

import importlib.metadata
import logging
from typing import Any

import h11
from hypercorn.config import Config as _HypercornConfig

log = logging.getLogger("runplane.http")

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
    version = importlib.metadata.version("hypercorn")
    if not supported(version):
        log.warning(
            "hypercorn serving fix skipped", extra={"hypercorn": version, "checked": _CHECKED}
        )
        _installed = False
        return False
    from hypercorn.protocol import h11 as h11_protocol

    h11_protocol.H11Protocol._send_h11_event = _send_h11_event  # type: ignore[method-assign]
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
