"""The node sampler: every period, the committed load of every connected node (from the
placement actor's fleet) written as one batch of ``node_samples`` rows
(``runplane/nodes/metrics.py``). A round the placement actor is too busy to answer is
skipped (the next one comes a period later)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from runplane.nodes import metrics
from runplane.persistence import Store
from runplane.placement import NodeLoad, NodeShape
from runplane.runtime import Actor, ActorError, clock

log = logging.getLogger("runplane.nodes")

FleetNow = Callable[[], Awaitable[list[tuple[NodeShape, NodeLoad]]]]


@dataclass(frozen=True, slots=True)
class SampleNodes:
    """Time for a round (sent to self)."""


class NodeSampler(Actor[SampleNodes]):
    def __init__(self, store: Store, fleet_now: FleetNow, period: float) -> None:
        self.store = store
        self.fleet_now = fleet_now
        self.period = period
        self.rounds = 0

    async def on_start(self) -> None:
        self.context.tell_after(self.period, SampleNodes())

    async def handle(self, msg: SampleNodes) -> None:
        self.context.tell_after(self.period, SampleNodes())
        try:
            fleet = await self.fleet_now()
        except ActorError as exc:
            log.warning("node sample round skipped", extra={"error": str(exc)})
            return
        now = int(clock.wall() * 1000)
        rows = [metrics.sample_of(shape, load, now) for shape, load in fleet]
        await self.store.transaction(metrics.write(rows, now))
        self.rounds += 1
