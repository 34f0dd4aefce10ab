"""What the heartbeat log and the keepalive log share: an actor that owns the latest
"last seen" time of many things (nodes, sessions) not written yet and writes them in ONE
statement every ``every`` seconds, and once more on an orderly stop.

A flush runs inside ``handle``, so nothing changes the pending map while it writes (what
arrives meanwhile waits in the mailbox). A failed write keeps the pending values for the
next flush: a store outage or a full disk is one warning line, anything else one with its
traceback. Nothing to rebuild on a restart: the rows hold every value written, and the
owners tell the log again at their next beat or keepalive.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from runplane.persistence import StoreFullError, StoreUnavailableError
from runplane.runtime import Actor

M = TypeVar("M")


class BatchedLog(Actor[M], Generic[M]):
    def __init__(
        self,
        write: Callable[[dict[str, int]], Awaitable[object]],
        every: float,
        *,
        tick: M,
        what: str,
        log: logging.Logger,
    ) -> None:
        self._write = write
        self.every = every
        self.pending: dict[str, int] = {}
        self._tick = tick
        self._what = what  # "the nodes' last heartbeats", named in the warning
        self._log = log

    async def on_start(self) -> None:
        self.context.tell_after(self.every, self._tick)

    def can_passivate(self) -> bool:
        return False

    async def on_stop(self) -> None:
        await self.flush()

    async def ticked(self) -> None:
        """The periodic flush, and the next one scheduled."""
        await self.flush()
        self.context.tell_after(self.every, self._tick)

    async def flush(self) -> int:
        """Write the pending values; how many rows were written (0 on failure)."""
        if not self.pending:
            return 0
        warning = f"writing {self._what} failed; kept for the next flush"
        try:
            await self._write(self.pending)
        except (StoreUnavailableError, StoreFullError) as exc:  # one line, no traceback
            self._log.warning(warning, extra={"pending": len(self.pending), "error": str(exc)})
            return 0
        except Exception:
            self._log.warning(warning, exc_info=True, extra={"pending": len(self.pending)})
            return 0
        written = len(self.pending)
        self.pending.clear()  # handle() is not re-entered: nothing came in meanwhile
        return written
