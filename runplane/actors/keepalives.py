"""The keepalive log: the actor that persists sessions' keepalives in batches.

A keepalive is a liveness signal, not a durable write (docs/sessions.md "Keepalives"): the
session actor keeps ``last_keepalive`` in memory (its idle and reap timers read it there)
and tells this log the new value (a message, no write). The log writes the latest
keepalive of every session kept alive since the last batch in ONE ``execute_many`` every
``every`` seconds (:data:`KEEPALIVE_FLUSH_SEC`), and once more on an orderly stop. A phase
change (``idle`` back to ``ready``, a stop) still writes at once, from the session actor,
with its last keepalive. Session views overlay the keepalives not written yet
(:class:`LatestKeepalives`). A crash loses at most one period of keepalives: the rebuilt
session actor reads every keepalive acknowledged more than ``every`` seconds before the
crash, and computes its deadlines from it (a lost keepalive counts as not sent). Sessions
with an ``idle_ttl_sec`` under :data:`LAZY_FROM_TTL_SEC` are written at each keepalive
(the session actor's ``lazy_from_ttl_sec``): for them a period would be a real share of
the idle threshold.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import assert_never

from runplane.persistence import Store, StoreFullError, StoreUnavailableError
from runplane.runtime import Actor, Asks
from runplane.sessions import repo

log = logging.getLogger("runplane.sessions")

#: Seconds between the keepalive log's batched writes of ``sessions.last_keepalive``: what
#: a crash may lose. Far under half of the default ``idle_ttl_sec`` (300 s: idle at
#: 150 s).
KEEPALIVE_FLUSH_SEC = 5.0
#: The shortest ``idle_ttl_sec`` whose keepalives are written lazily (idle at 50 s, ten
#: flush periods); shorter ones are written at each keepalive.
LAZY_FROM_TTL_SEC = 100


@dataclass(frozen=True, slots=True)
class Kept:
    """Session ``session_id`` was kept alive; its ``last_keepalive`` is now ``at_ms``."""

    session_id: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class FlushKeepalives(Asks[int]):
    """Write the pending keepalives now; answers how many rows were written (0 on failure)."""


@dataclass(frozen=True, slots=True)
class _FlushTick:
    """The periodic flush (sent to self)."""


@dataclass(frozen=True, slots=True)
class LatestKeepalives(Asks[dict[str, int]]):
    """The pending (not yet written) keepalives: session id -> unix ms."""


KeepaliveMsg = Kept | FlushKeepalives | _FlushTick | LatestKeepalives


class KeepaliveLog(Actor[KeepaliveMsg]):
    """Owns the keepalives not yet written: session id -> its latest ``last_keepalive``.

    A flush runs inside ``handle``, so nothing changes the pending map while it writes. A
    failed write keeps them for the next flush. Nothing to rebuild on a restart: the rows
    hold every keepalive written, and the session actors hold the newer ones (they tell
    the log again at their next keepalive).
    """

    def __init__(self, store: Store, every: float = KEEPALIVE_FLUSH_SEC) -> None:
        self.store = store
        self.every = every
        self.pending: dict[str, int] = {}

    async def on_start(self) -> None:
        self.context.tell_after(self.every, _FlushTick())

    def can_passivate(self) -> bool:
        return False

    async def handle(self, msg: KeepaliveMsg) -> object:
        match msg:
            case Kept(session_id, at_ms):
                self.pending[session_id] = max(at_ms, self.pending.get(session_id, at_ms))
                return None
            case _FlushTick():
                await self._flush()
                self.context.tell_after(self.every, _FlushTick())
                return None
            case FlushKeepalives():
                return await self._flush()
            case LatestKeepalives():
                return dict(self.pending)
            case _:
                assert_never(msg)

    async def on_stop(self) -> None:
        await self._flush()

    async def _flush(self) -> int:
        if not self.pending:
            return 0
        try:
            await repo.write_keepalives(self.store, self.pending)
        except (StoreUnavailableError, StoreFullError) as exc:  # one line, no traceback
            log.warning(
                "writing the sessions' last keepalives failed; kept for the next flush",
                extra={"sessions": len(self.pending), "error": str(exc)},
            )
            return 0
        except Exception:
            log.warning(
                "writing the sessions' last keepalives failed; kept for the next flush",
                exc_info=True,
                extra={"sessions": len(self.pending)},
            )
            return 0
        written = len(self.pending)
        self.pending.clear()  # handle() is not re-entered: nothing came in meanwhile
        return written
