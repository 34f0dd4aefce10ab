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

from runplane.actors.batched_log import BatchedLog
from runplane.nodes import repo as nodes_repo
from runplane.persistence import Store
from runplane.runtime import Asks

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


class HeartbeatLog(BatchedLog[BeatMsg]):
    """Owns the beats not yet written: node id -> wall ms of its latest beat
    (``batched_log.py``: one write per period; newer beats replace pending ones)."""

    def __init__(self, store: Store, every: float = BEAT_FLUSH_SEC) -> None:
        super().__init__(
            lambda pending: nodes_repo.write_beats(store, pending),
            every,
            tick=_FlushTick(),
            what="the nodes' last heartbeats",
            log=log,
        )
        self.store = store

    async def handle(self, msg: BeatMsg) -> object:
        match msg:
            case Beaten(node_id, at_ms):
                self.pending[node_id] = at_ms
                return None
            case _FlushTick():
                await self.ticked()
                return None
            case FlushBeats():
                return await self.flush()
            case LatestBeats():
                return dict(self.pending)
            case _:
                assert_never(msg)
