"""The connections that keep sessions alive by being open (docs/sessions.md "Keepalives"):
a client following a stream of a session's pod job (``GET /v1/jobs/{job_id}/streams/
{name}/data``) with a credential that may drive it counts as a continuous keepalive while
the connection stays open.

Plain bookkeeping, no I/O and no awaits (a connection's end is recorded from a ``finally``
that may run under cancellation): the streams route records opens and closes here, and the
session's actor reads it when its timer fires (:meth:`Drivers.seen`): a session with a
connection open is kept alive at that moment; one whose last connection closed is kept
alive as of the close, so its idle and reap deadlines run from then.
"""

from __future__ import annotations


class Drivers:
    def __init__(self) -> None:
        #: session id -> how many driving connections are open
        self._open: dict[str, int] = {}
        #: session id -> when its last driving connection closed (unix ms), until read
        self._closed: dict[str, int] = {}

    def opened(self, session_id: str) -> None:
        self._open[session_id] = self._open.get(session_id, 0) + 1

    def closed(self, session_id: str, at_ms: int) -> None:
        left = self._open.get(session_id, 0) - 1
        if left > 0:
            self._open[session_id] = left
            return
        self._open.pop(session_id, None)
        self._closed[session_id] = at_ms

    def count(self, session_id: str) -> int:
        """The driving connections open to the session now."""
        return self._open.get(session_id, 0)

    def seen(self, session_id: str, now_ms: int) -> int | None:
        """The latest moment a connection kept the session alive (unix ms): ``now_ms``
        while one is open, else when the last one closed (once: it is forgotten as it is
        read), None when none did since the last look."""
        if session_id in self._open:
            self._closed.pop(session_id, None)
            return now_ms
        return self._closed.pop(session_id, None)

    def forget(self, session_id: str) -> None:
        """The session ended: nothing more to remember of it."""
        self._closed.pop(session_id, None)
