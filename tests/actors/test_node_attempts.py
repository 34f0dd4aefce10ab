"""A node's attempt counters (placed, lost, ok) are its node actor's to write: the fleet
hands each count to the live actor, and counts a node with no live actor (lost, or never
connected since the start) with the same write, so none is dropped. Every backend."""

from __future__ import annotations

from pathlib import Path

from runplane.actors.node import NODES, CountAttempt
from runplane.nodes import repo as nodes_repo
from runplane.nodes.status import AttemptOutcome
from runplane.persistence import Store
from tests.actors.test_node_heartbeats import fleet_on


async def counters(store: Store, node_id: str) -> tuple[int, int, int]:
    row = await nodes_repo.get(store, node_id)
    assert row is not None
    return row.attempts_total, row.attempts_lost, row.attempts_ok


async def test_the_node_actor_writes_the_counters_it_is_sent(store: Store, tmp_path: Path) -> None:
    async with fleet_on(store, tmp_path, flush=float("inf"), grace=3600.0) as h:
        node, _ = await h.connect("node_a")
        await node.ask(CountAttempt(AttemptOutcome.PLACED))  # handled in order, then answered
        await node.ask(CountAttempt(AttemptOutcome.OK))
        assert await counters(store, "node_a") == (1, 0, 1)


async def test_the_fleet_counts_through_the_live_actor(store: Store, tmp_path: Path) -> None:
    async with fleet_on(store, tmp_path, flush=float("inf"), grace=3600.0) as h:
        node, _ = await h.connect("node_a")
        await h.fleet.node_outcome("node_a", AttemptOutcome.PLACED)
        await h.fleet.node_outcome("node_a", AttemptOutcome.LOST)
        await h.fleet.node_outcome("node_a", AttemptOutcome.PLACED)
        await node.ask(CountAttempt(AttemptOutcome.OK))  # queued behind the three
        assert await counters(store, "node_a") == (2, 1, 1)


async def test_a_node_without_a_live_actor_is_still_counted(store: Store, tmp_path: Path) -> None:
    async with fleet_on(store, tmp_path, flush=float("inf"), grace=3600.0) as h:
        await h.connect("node_a")
        await h.registry.passivate(NODES, "node_a")  # as after its loss: no actor now
        assert not h.registry.active(NODES, "node_a")
        await h.fleet.node_outcome("node_a", AttemptOutcome.LOST)
        await h.fleet.node_outcome("node_a", AttemptOutcome.OK)
        assert not h.registry.active(NODES, "node_a")  # counting does not revive it
        assert await counters(store, "node_a") == (0, 1, 1)
