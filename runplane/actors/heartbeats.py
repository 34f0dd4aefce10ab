"""The heartbeat log: the actor that persists node heartbeats in batches.

Node actors report each beat's wall time to it (a message, no write); it writes the latest
beat of every node that beat since the last batch in one ``execute_many`` every
``every`` seconds (5 s), and once more on an orderly stop. A status change (online,
disconnected, offline) still writes at once, from the node actor. Node views overlay the
beats not written yet (:class:`LatestBeats`), so ``GET /v1/nodes`` shows the last beat
received. A crash of the server (or of the log, which restarts empty) loses at most one
interval of ``last_heartbeat`` values: the rows then show a beat up to 5 s older. Liveness
never reads these values: the node actor keeps its own clock.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import assert_never

from runplane.nodes import repo as nodes_repo
from runplane.persistence import Store, StoreFullError, StoreUnavailableError
from runplane.runtime import Actor, Asks

log = logging.getLogger("runplane.nodes")

#: Seconds between the heartbeat log's batched writes of ``nodes.last_heartbeat``.
BEAT_FLUSH_SEC = 5.0


@dataclass(frozen=True, slots=True)
class Beaten:
    """A node beat (or said hello) at wall time ``at_ms`` (unix ms)."""

    node_id: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class FlushBeats(Asks[int]):
    """Write the pending beats now; answers how many rows were written (0 on failure)."""


@dataclass(frozen=True, slots=True)
class _FlushTick:
    """The periodic flush (sent to self)."""


@dataclass(frozen=True, slots=True)
class LatestBeats(Asks[dict[str, int]]):
    """The pending (not yet written) beats: node id -> unix ms."""


BeatMsg = Beaten | FlushBeats | _FlushTick | LatestBeats


class HeartbeatLog(Actor[BeatMsg]):
    """Owns the beats not yet written: node id -> wall ms of its latest beat.

    A flush runs inside ``handle``, so nothing changes the pending map while it writes;
    beats that arrive meanwhile wait in the mailbox. A failed write keeps the pending
    beats for the next flush (newer beats replace them meanwhile). It has nothing to
    rebuild on a restart: the rows hold every beat written, and the next beats refill it.
    """

    def __init__(self, store: Store, every: float = BEAT_FLUSH_SEC) -> None:
        self.store = store
        self.every = every
        self.pending: dict[str, int] = {}

    async def on_start(self) -> None:
        self.context.tell_after(self.every, _FlushTick())

    def can_passivate(self) -> bool:
        return False

    async def handle(self, msg: BeatMsg) -> object:
        match msg:
            case Beaten(node_id, at_ms):
                self.pending[node_id] = at_ms
                return None
            case _FlushTick():
                await self._flush()
                self.context.tell_after(self.every, _FlushTick())
                return None
            case FlushBeats():
                return await self._flush()
            case LatestBeats():
                return dict(self.pending)
            case _:
                assert_never(msg)

    async def on_stop(self) -> None:
        await self._flush()

    async def _flush(self) -> int:
        if not self.pending:
            return 0
        try:
            await nodes_repo.write_beats(self.store, self.pending)
        except (StoreUnavailableError, StoreFullError) as exc:  # one line, no traceback
            log.warning(
                "writing the nodes' last heartbeats failed; kept for the next flush",
                extra={"nodes": len(self.pending), "error": str(exc)},
            )
            return 0
        except Exception:
            log.warning(
                "writing the nodes' last heartbeats failed; kept for the next flush",
                exc_info=True,
                extra={"nodes": len(self.pending)},
            )
            return 0
        written = len(self.pending)
        self.pending.clear()  # handle() is not re-entered: nothing came in meanwhile
        return written
