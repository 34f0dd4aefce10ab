"""A draining node (its agent said ``draining``): the node actor takes it out of placement
while keeping the session, refuses new run orders, turns each ``job_released`` into the
node-loss requeue (attempts + 1, the error naming the node's shutdown, failed after the
third loss), ignores a release of an attempt that is not its own, and is ``offline`` as
soon as the drained agent goes away. The actor tree runs in process on a real store; the
agent is played by the test through its session outbox, as in ``test_crash_recovery``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from runplane.actors import placement as pl
from runplane.actors.job_messages import JOBS, LoseAttempt
from runplane.actors.node import NODES, AttemptEnded, Deliver, Drain, Released, drained_reason
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.jobs.phase import MAX_ATTEMPTS
from runplane.jobs.rows import JobRow
from runplane.jobs.view import job_view
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
    used_cpu,
)

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

__all__ = ["store"]  # the fixture, imported


class Node(Agent):
    """The test's agent, with its session outbox (what the node actor holds) at hand."""

    @property
    def outbox(self) -> trio.MemorySendChannel[str]:
        return self._send


async def row(root: Root, job_id: str) -> JobRow:
    found = await repo.get_row(root.store, job_id, None)
    assert found is not None
    return found


async def status(root: Root, node_id: str) -> str:
    views = {v["id"]: v for v in await root.fleet.views()}
    return str(views[node_id]["status"])


async def in_fleet(root: Root, node_id: str) -> bool:
    return node_id in await root.placement.ask(pl.Loads())


async def drain(root: Root, agent: Node, deadline_sec: float = 30.0) -> None:
    """What the WebSocket handler does with ``draining`` from ``agent``'s session."""
    await root.registry.tell(NODES, agent.node_id, Drain(agent.outbox, deadline_sec))


async def release(root: Root, agent: Node, job_id: str) -> None:
    """What the WebSocket handler does with ``job_released``: the node actor names the
    reason (its attempt only), then the handler waits for the job actor to requeue it."""
    attempt = agent.runs[job_id]
    reason = await root.registry.ask(NODES, agent.node_id, Released(job_id, attempt))
    if reason is not None:
        await root.registry.ask(JOBS, job_id, LoseAttempt(attempt, reason), timeout=None)


async def test_a_draining_node_gets_no_new_work_and_a_hand_back_requeues(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        a = Node(root, agents, "node_a", cpu=4)
        await a.connect()
        first = await submit(root)
        await eventually(lambda: all_in(a.runs, [first]), "placed on node_a")
        await a.start(first)

        await drain(root, a)
        await eventually(lambda: equals(status(root, "node_a"), "draining"), "status draining")
        await eventually(lambda: equals(in_fleet(root, "node_a"), False), "out of placement")
        # room is left on node_a, but nothing more is placed there
        second = await submit(root)
        await eventually(lambda: equals(waits(root, second), pl.NO_NODES), "second waits")
        assert second not in a.runs

        await release(root, a, first)
        await eventually(lambda: equals(phase(root, first), "queued"), "first requeued")
        requeued = await row(root, first)
        assert requeued.attempts == 1
        assert requeued.error == drained_reason("node_a")
        view = job_view(requeued)
        assert view["phase"] == "queued" and view["attempts"] == 1
        assert view["error"] == "node node_a shut down (agent drained; requeued)"

        # another node takes both; the new attempt no longer carries the old error
        b = Node(root, agents, "node_b", cpu=4)
        await b.connect()
        await eventually(lambda: all_in(b.runs, [first, second]), "both placed on node_b")
        assert b.runs[first] == 2
        assert (await row(root, first)).error is None
        assert a.runs == {first: 1}
        assert a.cancels == []  # handed back, not cancelled


async def test_a_run_order_racing_the_drain_is_not_delivered(store: Store, tmp_path: Path) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        a = Node(root, agents, "node_a", cpu=4)
        await a.connect()
        await drain(root, a)
        await eventually(lambda: equals(in_fleet(root, "node_a"), False), "out of placement")
        # an assignment planned before the drain reached placement: the order is refused
        order = p.Run(job_id="job_x", attempt=1, spec=p.RunSpec(command=["true"]))
        assert await root.fleet.deliver("node_a", order) is False
        # a cancel still goes through: the session is kept
        cancel = p.Cancel(job_id="job_y", attempt=1)
        assert await root.fleet.deliver("node_a", cancel) is True
        await eventually(lambda: equals(_cancels(a), ["job_y"]), "cancel delivered")
        assert a.runs == {}


async def test_a_release_of_an_attempt_not_on_the_node_is_ignored(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        a = Node(root, agents, "node_a", cpu=2)
        b = Node(root, agents, "node_b", cpu=2)
        await a.connect()
        job_id = await submit(root)
        await eventually(lambda: all_in(a.runs, [job_id]), "placed on node_a")
        await a.start(job_id)
        await b.connect()
        await drain(root, b)
        b.runs[job_id] = 1  # node_b claims node_a's attempt
        await release(root, b, job_id)
        # handled in order: once this answers, the release was handled (and ignored)
        await root.registry.ask(NODES, "node_b", Deliver(p.FinishedAck(job_id="x", attempt=1)))
        await a.finish(job_id)  # still node_a's: its finish is recorded
        assert await phase(root, job_id) == "succeeded"
        assert (await row(root, job_id)).attempts == 0


async def test_the_third_hand_back_fails_the_job_saying_so(store: Store, tmp_path: Path) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        job_id = await submit(root)
        for n in range(1, MAX_ATTEMPTS + 1):
            agent = Node(root, agents, f"node_{n}", cpu=4)
            await agent.connect()
            await eventually(lambda a=agent: all_in(a.runs, [job_id]), f"placed on node_{n}")
            await agent.start(job_id)
            await drain(root, agent)
            await release(root, agent, job_id)
            want = "queued" if n < MAX_ATTEMPTS else "failed"
            await eventually(lambda w=want: equals(phase(root, job_id), w), f"{want} after {n}")
        failed = await row(root, job_id)
        assert failed.attempts == MAX_ATTEMPTS
        assert failed.error == (
            f"lost its node {MAX_ATTEMPTS} times "
            f"(last: {drained_reason(f'node_{MAX_ATTEMPTS}')}); giving up"
        )


async def test_a_drained_node_is_offline_as_soon_as_its_agent_leaves(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        a = Node(root, agents, "node_a", cpu=4)
        await a.connect()
        job_id = await submit(root)
        await eventually(lambda: all_in(a.runs, [job_id]), "placed")
        await a.start(job_id)
        await drain(root, a)
        await a.finish(job_id)  # it finished within the drain: its real outcome
        assert await phase(root, job_id) == "succeeded"
        await eventually(lambda: equals(used_cpu(root, "node_a"), -1.0), "not in placement")
        # the finish's AttemptEnded, then the end of the session, as the handler sends them
        await root.registry.tell(NODES, "node_a", AttemptEnded(job_id, a.runs[job_id]))
        ref = await root.registry.get(NODES, "node_a")
        await root.fleet.detach(ref, "node_a", a.outbox)
        await eventually(lambda: equals(status(root, "node_a"), "offline"), "offline at once")


async def test_a_reconnect_of_the_node_makes_it_placeable_again(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        a = Node(root, agents, "node_a", cpu=4)
        await a.connect()
        await drain(root, a)
        await eventually(lambda: equals(in_fleet(root, "node_a"), False), "out of placement")
        again = Node(root, agents, "node_a", cpu=4)  # a new agent process, not draining
        await again.connect()
        await eventually(lambda: equals(status(root, "node_a"), "online"), "online again")
        job_id = await submit(root)
        await eventually(lambda: all_in(again.runs, [job_id]), "placed on the new session")


async def waits(root: Root, job_id: str) -> str | None:
    reasons = await root.placement.ask(pl.WaitReasons((job_id,)))
    return reasons.get(job_id)


async def _cancels(agent: Node) -> list[str]:
    await trio.lowlevel.checkpoint()
    return agent.cancels
