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

from runplane.actors.batched_log import BatchedLog
from runplane.persistence import Store
from runplane.runtime import Asks
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


class KeepaliveLog(BatchedLog[KeepaliveMsg]):
    """Owns the keepalives not yet written: session id -> its latest ``last_keepalive``
    (``batched_log.py``: one write per period; the session actors hold the newer ones)."""

    def __init__(self, store: Store, every: float = KEEPALIVE_FLUSH_SEC) -> None:
        super().__init__(
            lambda pending: repo.write_keepalives(store, pending),
            every,
            tick=_FlushTick(),
            what="the sessions' last keepalives",
            log=log,
        )
        self.store = store

    async def handle(self, msg: KeepaliveMsg) -> object:
        match msg:
            case Kept(session_id, at_ms):
                self.pending[session_id] = max(at_ms, self.pending.get(session_id, at_ms))
                return None
            case _FlushTick():
                await self.ticked()
                return None
            case FlushKeepalives():
                return await self.flush()
            case LatestKeepalives():
                return dict(self.pending)
            case _:
                assert_never(msg)
