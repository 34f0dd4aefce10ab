"""Gangs in the placement actor (docs/placement.md "Gangs"): a gang is handed over with
every rank's node and a master port once it fits whole, holds nothing while it waits (a
plain job takes the free node meanwhile), frees every rank's node when it ends, and never
preempts nor is preempted."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.actors import placement as pl
from runplane.persistence import open_store
from runplane.placement import NodeShape
from runplane.placement.gang import Seats
from runplane.runtime import ChildSpec, Supervisor

from .fakes import shell_spec


@dataclass
class Calls:
    assigned: list[tuple[str, str]] = field(default_factory=list)
    gangs: list[tuple[str, tuple[str, ...], int]] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)


@dataclass
class Placement:
    ref: Any
    calls: Calls

    async def tell(self, msg: pl.PlacementMsg) -> None:
        await self.ref.tell(msg)
        await self.ref.ask(pl.Loads())
        await trio.sleep(0.01)  # the hand-overs it started
        await self.ref.ask(pl.Loads())

    async def active(self) -> dict[str, int]:
        loads = await self.ref.ask(pl.Loads())
        return {node: load.active_jobs for node, load in loads.items()}


@pytest.fixture
async def placement(tmp_path: Path) -> AsyncIterator[Placement]:
    store = open_store("memory", tmp_path)
    await store.open()
    calls = Calls()

    async def assign(job_id: str, node_id: str) -> pl.Handover:
        calls.assigned.append((job_id, node_id))
        return pl.Handover(taken=True)

    async def assign_gang(job_id: str, nodes: tuple[str, ...], port: int) -> pl.Handover:
        calls.gangs.append((job_id, nodes, port))
        return pl.Handover(taken=True)

    async def preempt(job_id: str, by: str, grace_sec: int) -> bool:
        calls.preempted.append(job_id)
        return True

    def told(job_id: str, reason: str) -> bool:
        calls.reasons[job_id] = reason
        return True

    def actor() -> pl.PlacementActor:
        return pl.PlacementActor(
            store=store, assign=assign, assign_gang=assign_gang, tell_reason=told, preempt=preempt
        )

    sup = Supervisor([ChildSpec("placement", actor)], name="test")
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        try:
            yield Placement(sup.child("placement"), calls)
        finally:
            await sup.stop()
            await store.close()


LIMITS = frozenset({"limit-cpu"})  # the jobs' cpu_cores is enforced


def one_slot(node_id: str, slots: int = 1) -> NodeShape:
    return NodeShape(node_id, cpu_cores=8, ram_gb=32, max_concurrency=slots, capabilities=LIMITS)


def job(job_id: str, nodes: int = 1, priority: int = 100, **body: Any) -> pl.Enqueue:
    return pl.Enqueue(job_id, priority, shell_spec(1, nodes=nodes, **body), "org_x")


async def test_a_gang_waits_holding_nothing_then_goes_whole(
    placement: Placement, autojump_clock: Any
) -> None:
    calls = placement.calls
    await placement.tell(pl.NodeUp(one_slot("n1")))
    await placement.tell(pl.NodeUp(one_slot("n2")))
    await placement.tell(job("busy"))  # takes one node
    await placement.tell(job("gang", nodes=2, priority=500))
    assert calls.gangs == []
    assert calls.reasons["gang"].startswith("gang of 2 ranks: 1 node fits now (")
    assert sum((await placement.active()).values()) == 1  # the gang holds nothing
    # a plain job submitted meanwhile takes the free node (behind the gang in the queue)
    await placement.tell(job("plain"))
    assert [j for j, _ in calls.assigned] == ["busy", "plain"]
    assert (await placement.ref.ask(pl.StatsNow())).gangs_waiting == 1

    # both nodes free: the gang goes whole, each rank on its own node, one master port
    await placement.tell(pl.Release("busy"))
    await placement.tell(pl.Release("plain"))
    [(gang, nodes, port)] = calls.gangs
    assert gang == "gang" and sorted(nodes) == ["n1", "n2"] and port == 29500
    assert await placement.active() == {"n1": 1, "n2": 1}
    stats = await placement.ref.ask(pl.StatsNow())
    assert stats.gangs_placed == 1 and stats.gangs_waiting == 0

    # its end frees every rank's node
    await placement.tell(pl.Release("gang"))
    assert await placement.active() == {"n1": 0, "n2": 0}


async def test_two_gangs_on_the_same_rank_0_node_get_distinct_ports(
    placement: Placement, autojump_clock: Any
) -> None:
    for node in ("n1", "n2"):
        await placement.tell(pl.NodeUp(one_slot(node, slots=2)))
    await placement.tell(job("g1", nodes=2))
    await placement.tell(job("g2", nodes=2))
    gangs = placement.calls.gangs
    assert len(gangs) == 2
    by_rank_0: dict[str, list[int]] = {}
    for _, nodes, port in gangs:
        by_rank_0.setdefault(nodes[0], []).append(port)
    for ports in by_rank_0.values():  # never one port twice on a rank 0 node
        assert len(set(ports)) == len(ports)
    assert {p for ports in by_rank_0.values() for p in ports} <= {29500, 29501}


def test_seats_pick_the_lowest_free_port_per_rank_0_node() -> None:
    seats = Seats()
    assert seats.seat("a", ("n1", "n2")).master_port == 29500
    assert seats.seat("b", ("n1", "n3")).master_port == 29501
    assert seats.seat("c", ("n2", "n1")).master_port == 29500  # another rank 0 node
    assert seats.others_on("n1") == {"c"}
    seats.drop("a")
    assert seats.seat("d", ("n1", "n4")).master_port == 29500  # freed by a's end
    assert seats.seat("e", ("n5", "n1"), 29999).master_port == 29999  # rebuilt as stored


async def test_a_gang_neither_preempts_nor_is_preempted(
    placement: Placement, autojump_clock: Any
) -> None:
    calls = placement.calls
    await placement.tell(pl.NodeUp(one_slot("n1")))
    await placement.tell(pl.NodeUp(one_slot("n2")))
    # a preemptible gang fills the fleet: a higher-priority job does not stop it
    await placement.tell(job("gang", nodes=2, priority=10, preemptible=True))
    assert len(calls.gangs) == 1
    await placement.tell(job("urgent", priority=900))
    assert calls.preempted == []
    await placement.tell(pl.Release("gang"))
    assert [j for j, _ in calls.assigned] == ["urgent"]
    # a low preemptible job runs; a high gang waits rather than preempt it
    await placement.tell(job("low", priority=10, preemptible=True))
    await placement.tell(job("high_gang", nodes=2, priority=900))
    assert calls.preempted == []
    assert calls.reasons["high_gang"].startswith("gang of 2 ranks: 0 nodes fit now")
