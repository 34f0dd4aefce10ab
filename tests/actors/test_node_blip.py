"""A node blip loses no work (#13 item 1): placement places only on a node that can take a
run order now. A node whose session ended (``disconnected``, within its grace period) is
out of the placement fleet, so a job submitted meanwhile waits with a reason instead of
being assigned to it (and failed after three "losses" in a few milliseconds); when the
agent comes back, the job runs there. A run order that cannot be handed to the session
(the node went away between the plan and the order) sends the job back to the queue
without a requeue counted against it, takes the node out of placement until its next
sign of life, and counts the loss on the node. The actor tree runs in process on a real
store; the agent is played by the test through its session outbox.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from runplane.actors import placement as pl
from runplane.actors.node import NODES, Beat
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.jobs.rows import JobRow
from runplane.nodes import repo as nodes_repo
from runplane.persistence import Store
from runplane.system import Root
from tests.actors.harness import (
    Agent,
    all_in,
    equals,
    eventually,
    phase,
    running_root,
    store,
    submit,
)

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

__all__ = ["store"]  # the fixture, imported


class Node(Agent):
    @property
    def outbox(self) -> trio.MemorySendChannel[str]:
        return self._send

    async def disconnect(self) -> None:
        """What the WebSocket handler does when the socket closes."""
        ref = await self.root.registry.get(NODES, self.node_id)
        await self.root.fleet.detach(ref, self.node_id, self._send)

    def break_session(self) -> None:
        """The session's socket is gone, but the server has not heard yet."""
        self._send.close()  # what the session writer does when its socket is gone


async def row(root: Root, job_id: str) -> JobRow:
    found = await repo.get_row(root.store, job_id, None)
    assert found is not None
    return found


async def in_fleet(root: Root, node_id: str) -> bool:
    return node_id in await root.placement.ask(pl.Loads())


async def waits(root: Root, job_id: str) -> str | None:
    return (await root.placement.ask(pl.WaitReasons((job_id,)))).get(job_id)


async def status(root: Root, node_id: str) -> str:
    node = await nodes_repo.get(root.store, node_id)
    assert node is not None
    return node.status


async def test_a_job_submitted_while_the_only_node_is_disconnected_waits_for_it(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        a = Node(root, agents, "node_a", cpu=4)
        await a.connect()
        await eventually(lambda: in_fleet(root, "node_a"), "node_a in placement")
        await a.disconnect()
        await eventually(lambda: equals(status(root, "node_a"), "disconnected"), "disconnected")
        await eventually(lambda: equals(in_fleet(root, "node_a"), False), "out of placement")

        job_id = await submit(root)
        await eventually(lambda: equals(waits(root, job_id), pl.NO_NODES), "waits with a reason")
        waiting = await row(root, job_id)
        assert (waiting.phase.value, waiting.attempt, waiting.attempts) == ("queued", 0, 0)
        assert job_id not in a.runs
        # still within its grace period: it left placement at the disconnect, not at the loss
        assert await status(root, "node_a") == "disconnected"

        back = Node(root, agents, "node_a", cpu=4)  # the agent's new session
        await back.connect()
        await eventually(lambda: all_in(back.runs, [job_id]), "placed when the node is back")
        await back.start(job_id)
        await back.finish(job_id)
        done = await row(root, job_id)
        assert (done.phase.value, done.attempt, done.attempts) == ("succeeded", 1, 0)


async def test_an_undeliverable_run_order_requeues_uncounted_and_unreadies_the_node(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        a = Node(root, agents, "node_a", cpu=4)
        await a.connect()
        await eventually(lambda: in_fleet(root, "node_a"), "node_a in placement")
        a.break_session()  # placement still has it: the race of item 1

        job_id = await submit(root)
        await eventually(lambda: equals(waits(root, job_id), pl.NO_NODES), "back, waiting")
        waiting = await row(root, job_id)
        # back in the queue with no requeue counted: nothing ran
        assert (waiting.phase.value, waiting.attempt, waiting.attempts) == ("queued", 1, 0)
        assert waiting.error == "node node_a went away before the run order"
        assert not await in_fleet(root, "node_a")

        async def counted() -> tuple[int, int] | None:
            node = await nodes_repo.get(root.store, "node_a")
            return None if node is None else (node.attempts_total, node.attempts_lost)

        # the node's counts are told to its actor (never waited for): written a moment later
        await eventually(lambda: equals(counted(), (1, 1)), "the lost attempt counted")
        events = await repo.events_after(root.store, job_id, 0)
        assert any(
            "attempt 1 never started: node node_a went away before the run order; "
            "back in the queue" in e.data
            for e in events
        )

        back = Node(root, agents, "node_a", cpu=4)
        await back.connect()
        await eventually(lambda: all_in(back.runs, [job_id]), "placed again")
        assert back.runs[job_id] == 2
        await back.start(job_id)
        await back.finish(job_id)
        done = await row(root, job_id)
        assert (done.phase.value, done.attempts, done.error) == ("succeeded", 0, None)


async def test_a_node_whose_order_failed_is_back_in_placement_at_its_next_beat(
    store: Store, tmp_path: Path
) -> None:
    """A session that would not take one order (full, say) but is still alive: the node's
    next heartbeat puts it back."""
    async with running_root(store, tmp_path) as (root, agents):
        a = Node(root, agents, "node_a", cpu=4)
        await a.connect()
        await eventually(lambda: in_fleet(root, "node_a"), "node_a in placement")
        order = p.Run(job_id="job_x", attempt=1, spec=p.RunSpec(command=["true"]))
        a.break_session()
        assert await root.fleet.deliver("node_a", order) is False
        await eventually(lambda: equals(in_fleet(root, "node_a"), False), "out of placement")
        await root.registry.tell(NODES, "node_a", Beat(()))
        await eventually(lambda: in_fleet(root, "node_a"), "back after a beat")
        assert await status(root, "node_a") == "online"


async def test_placement_rebuilt_while_a_node_is_disconnected_leaves_it_out(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        a = Node(root, agents, "node_a", cpu=4)
        await a.connect()
        await a.disconnect()
        await eventually(lambda: equals(status(root, "node_a"), "disconnected"), "disconnected")
        assert await phase(root, await submit(root)) == "queued"
        assert await nodes_repo.connected_ids(root.store) == []
