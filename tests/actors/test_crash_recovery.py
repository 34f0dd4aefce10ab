"""Crash injection: each actor kind, crashed mid-load by a message that makes ``handle``
raise, is restarted by its supervisor and rebuilds its state from the store, so nothing is
lost or counted twice and work goes on.

The actor tree runs in process (``Root``) on a real store (SQLite and PostgreSQL); a node
agent is played by the test through the node's session outbox (the orders it receives)
and the agent reports it sends to the job actors, exactly what the WebSocket handler does.
No sleeps are asserted on: each step waits for its outcome with a generous deadline.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.actors import admission as adm
from runplane.actors import placement as pl
from runplane.actors.job import JOBS, AgentFinished, AgentLogs, AgentPhase
from runplane.actors.node import NODES, Beat, Deliver
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.jobs.spec import SubmitJobBody
from runplane.nodes.enrollment import NodeIdentity
from runplane.persistence import Store, open_store
from runplane.policy.refusal import AdmissionRefused
from runplane.runtime import ActorCrashed
from runplane.services.jobs import Submitter
from runplane.settings import load_settings
from runplane.stacks import load_catalog
from runplane.system import Root

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

WHO = Submitter("org_default", "usr_alice")
DEADLINE = 20.0


@pytest.fixture
async def store(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Store]:
    url = None if backend == "sqlite" else str(request.getfixturevalue("pg_database"))
    s = open_store(url, tmp_path / "data")
    await s.open()
    try:
        yield s
    finally:
        await s.close()


@asynccontextmanager
async def running_root(
    store: Store, tmp_path: Path, **env: str
) -> AsyncIterator[tuple[Root, trio.Nursery]]:
    """The actor tree on ``store``, and a nursery for the test's agents (cancelled first)."""
    async with _tree(store, tmp_path, **env) as root, trio.open_nursery() as agents:
        try:
            yield root, agents
        finally:
            agents.cancel_scope.cancel()


@asynccontextmanager
async def _tree(store: Store, tmp_path: Path, **env: str) -> AsyncIterator[Root]:
    settings = load_settings(
        {
            "RUNPLANE_DATA_DIR": str(tmp_path / "data"),
            "RUNPLANE_LOCAL_AGENT": "0",
            **{f"RUNPLANE_{k.upper()}": v for k, v in env.items()},
        }
    )
    root = Root(settings, store, load_catalog())
    async with trio.open_nursery() as nursery:
        await nursery.start(root.run)
        try:
            yield root
        finally:
            with trio.CancelScope(shield=True):
                await root.stop()
            nursery.cancel_scope.cancel()


class Agent:
    """A node agent played by the test: its session outbox receives the server's orders."""

    def __init__(self, root: Root, nursery: trio.Nursery, node_id: str, cpu: int) -> None:
        self.root = root
        self.nursery = nursery
        self.node_id = node_id
        self.cpu = cpu
        self.runs: dict[str, int] = {}  # job id -> attempt of each Run received
        self.cancels: list[str] = []
        self._send, self._receive = trio.open_memory_channel[str](1024)

    async def connect(self) -> None:
        hello = p.Hello(
            protocol=p.PROTOCOL_VERSION,
            agent_version="test",
            facts=p.Facts(
                name=self.node_id,
                cpu_cores=self.cpu,
                ram_gb=64,
                arch="x86_64",
                os="linux",
                max_concurrency=8,
            ),
        )
        identity = NodeIdentity(node_id=self.node_id, tier="community", org_id="org_default")
        await self.root.fleet.attach(identity, hello, self._send)
        self.nursery.start_soon(self._read)

    async def _read(self) -> None:
        async for text in self._receive:
            msg = p.decode_server(text)
            if isinstance(msg, p.Run):
                self.runs[msg.job_id] = msg.attempt
            elif isinstance(msg, p.Cancel):
                self.cancels.append(msg.job_id)

    async def report(self, job_id: str, msg: Any) -> Any:
        return await self.root.registry.ask(JOBS, job_id, msg)

    async def start(self, job_id: str) -> None:
        attempt = self.runs[job_id]
        await self.report(job_id, AgentPhase(self.node_id, attempt, "pulling"))
        await self.report(job_id, AgentPhase(self.node_id, attempt, "running"))

    async def finish(self, job_id: str, outcome: str = "succeeded") -> None:
        attempt = self.runs[job_id]
        done = AgentFinished(self.node_id, attempt, outcome, None, {})
        assert await self.report(job_id, done) is True


async def eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    with trio.move_on_after(DEADLINE):
        while not await check():  # noqa: ASYNC110 (polls the actors' answers: no event)
            await trio.sleep(0.01)
        return
    raise AssertionError(f"not within {DEADLINE} s: {what}")


async def submit(root: Root, cpu: int = 2) -> str:
    body = SubmitJobBody.model_validate(
        {"stack": "shell", "command": ["true"], "limits": {"cpu_cores": cpu}}
    )
    created = await root.jobs.submit(body, WHO)
    return created.row.id


async def phase(root: Root, job_id: str) -> str:
    row = await repo.get_row(root.store, job_id, None)
    assert row is not None
    return row.phase.value


async def queue_of(root: Root) -> set[str]:
    return set(await root.placement.ask(pl.Queued()))


async def used_cpu(root: Root, node_id: str) -> float:
    loads = await root.placement.ask(pl.Loads())
    return loads[node_id].used_cpu if node_id in loads else -1.0


async def restarts(root: Root) -> int:
    await trio.lowlevel.checkpoint()
    return root.supervisor.statistics().restarts


# placement --------------------------------------------------------------------------------


async def test_placement_crash_keeps_queue_reservations_and_reasons(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        running = [await submit(root) for _ in range(2)]  # fill node_a (2 + 2 of 4 cores)
        await eventually(lambda: _all_in(agent.runs, running), "both placed")
        for job_id in running:
            await agent.start(job_id)
        waiting = [await submit(root) for _ in range(3)]
        await eventually(lambda: _eq(queue_of(root), set(waiting)), "three queued")
        reasons = await root.placement.ask(pl.WaitReasons(tuple(waiting)))
        assert set(reasons) == set(waiting) and all(reasons.values())

        # crash it mid-load: the poison is followed by more work already in its mailbox
        before = root.supervisor.statistics().restarts
        poison = pl.Enqueue("job_poison", 0, None)  # type: ignore[arg-type]  # no spec
        await root.placement.tell(poison)  # handle raises
        late = await submit(root)  # its Enqueue waits behind the poison
        await eventually(lambda: _gt(restarts(root), before), "placement restarted")

        # nothing lost, nothing counted twice
        assert await queue_of(root) == {*waiting, late}
        assert await used_cpu(root, "node_a") == 4.0  # two running jobs, not 0 and not 8
        reasons = await root.placement.ask(pl.WaitReasons((*waiting, late)))
        assert set(reasons) == {*waiting, late}
        assert all("node" in r or "cpu" in r.lower() for r in reasons.values()), reasons

        # work goes on: a finished job frees room for exactly one more
        await agent.finish(running[0])
        await eventually(lambda: _count_in(agent.runs, [*waiting, late], 1), "one more placed")
        assert await used_cpu(root, "node_a") == 4.0
        assert len(await queue_of(root)) == 3


async def test_assignment_won_by_a_dead_placement_is_counted_not_doubled(
    store: Store, tmp_path: Path
) -> None:
    """An assignment handed over by the crashed incarnation can reach the job after the
    new one rebuilt its queue: the job refuses the second assignment and names its node,
    and placement moves the reservation there instead of placing it twice."""
    async with running_root(store, tmp_path) as (root, agents):
        a, b = Agent(root, agents, "node_a", cpu=4), Agent(root, agents, "node_b", cpu=4)
        await a.connect()
        job_id = await submit(root)
        await eventually(lambda: _all_in(a.runs, [job_id]), "placed on node_a")
        await b.connect()
        # the job is on node_a; a placement that still thinks it queued assigns it to node_b
        answer = await root._assign(job_id, "node_b")
        assert answer == pl.Handover(taken=False, on_node="node_a")
        row = await repo.get_row(root.store, job_id, None)
        assert row is not None
        await root.placement.tell(pl.Enqueue.of(row))
        await eventually(lambda: _eq(used_cpu(root, "node_a"), 2.0), "held on node_a")
        assert await used_cpu(root, "node_b") == 0.0
        assert job_id not in await queue_of(root)
        assert await phase(root, job_id) == "assigned"


# job --------------------------------------------------------------------------------------


async def test_job_actor_crash_loses_no_event_and_repeats_none(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        job_id = await submit(root)
        await eventually(lambda: _all_in(agent.runs, [job_id]), "placed")
        await agent.start(job_id)
        attempt = agent.runs[job_id]
        await agent.report(
            job_id, AgentLogs("node_a", attempt, (("stdout", "one"), ("stdout", "two")))
        )

        # crash it: an outcome that is no phase makes handle raise
        poison = AgentFinished("node_a", attempt, "exploded", None, {})
        with pytest.raises(ActorCrashed):
            await agent.report(job_id, poison)

        # restarted from its row: same attempt, reports still accepted, seq continues
        await agent.report(job_id, AgentLogs("node_a", attempt, (("stdout", "three"),)))
        await agent.finish(job_id)
        assert await phase(root, job_id) == "succeeded"

        events = await repo.events_after(root.store, job_id, 0, limit=1000)
        seqs = [e.seq for e in events]
        assert seqs == list(range(1, len(seqs) + 1))  # no gap, no repeat
        lines = [e.data for e in events if e.kind == "log" and '"stream":"stdout"' in e.data]
        assert [x for x in ("one", "two", "three") if any(f'"{x}"' in line for line in lines)] == [
            "one",
            "two",
            "three",
        ]
        assert len(lines) == 3
        notes = [e.data for e in events if e.kind == "log" and '"stream":"system"' in e.data]
        assert len(notes) == 1 and "attempt 1 on node node_a (requeues so far: 0)" in notes[0]
        phases = [e.data for e in events if e.kind == "phase"]
        assert sum('"succeeded"' in x for x in phases) == 1
        # the SSE follower sees the same, once, and ends
        seen = [e.seq async for batch in root.jobs.follow(job_id, 0) for e in batch]
        assert seen == seqs
        # slot and reservation released exactly once
        ledger = await root.admission.ask(adm.Ledger())
        assert ledger.live == 0
        assert await used_cpu(root, "node_a") == 0.0


# node -------------------------------------------------------------------------------------


async def test_node_actor_crash_keeps_session_capacity_and_attempts(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        first = await submit(root)
        await eventually(lambda: _all_in(agent.runs, [first]), "placed")
        await agent.start(first)
        assert await used_cpu(root, "node_a") == 2.0

        with pytest.raises(ActorCrashed):
            await root.registry.ask(NODES, "node_a", Deliver(None))  # type: ignore[arg-type]

        # restarted: it resumed the session and re-announced the node, without doubling
        await eventually(lambda: _eq(used_cpu(root, "node_a"), 2.0), "node announced again")
        await root.registry.tell(NODES, "node_a", Beat((("first", 1),)))
        # new work reaches the agent through the resumed session
        second = await submit(root)
        await eventually(lambda: _all_in(agent.runs, [second]), "second placed on the session")
        assert await used_cpu(root, "node_a") == 4.0
        # the node still knows the first attempt: a finish is recorded and frees its room
        await agent.finish(first)
        await eventually(lambda: _eq(used_cpu(root, "node_a"), 2.0), "first released")
        assert await phase(root, first) == "succeeded"
        views = {v["id"]: v for v in await root.fleet.views()}
        assert views["node_a"]["status"] == "online"
        assert views["node_a"]["active_jobs"] == 1


# admission --------------------------------------------------------------------------------


async def test_admission_crash_recounts_the_ledger_and_keeps_the_quota(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path, max_concurrent_org="5") as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        jobs = [await submit(root) for _ in range(4)]
        await eventually(lambda: _count_in(agent.runs, jobs, 2), "two placed")
        before = await root.admission.ask(adm.Ledger())

        # crash it mid-load: a phase that does not exist makes handle raise; a submit is
        # already waiting behind it
        restarts_before = root.supervisor.statistics().restarts
        await root.admission.tell(adm.PhaseChanged(jobs[0], "exploded", "org_default", "usr_alice"))
        fifth = await submit(root)
        await eventually(lambda: _gt(restarts(root), restarts_before), "admission restarted")

        after = await root.admission.ask(adm.Ledger())
        assert after.live == before.live + 1 == 5
        assert after.per_org == {"org_default": 5}
        assert after.per_user == {("org_default", "usr_alice"): 5}
        assert after.on_node_per_org == {"org_default": 2}
        with pytest.raises(AdmissionRefused):  # the quota holds: 5 live of 5
            await submit(root)

        # work goes on: a job that ends frees exactly one slot
        placed = [j for j in jobs if j in agent.runs]
        await agent.start(placed[0])
        await agent.finish(placed[0])
        await eventually(lambda: _live_is(root, 4), "slot freed")
        sixth = await submit(root)
        assert await phase(root, sixth) == "queued"
        with pytest.raises(AdmissionRefused):
            await submit(root)
        assert fifth != sixth


async def test_admission_counts_live_work_it_missed_at_its_next_transition(
    store: Store, tmp_path: Path
) -> None:
    """A job admitted by an incarnation that crashed before the new one recounted is
    counted at its next phase change (it carries its org and submitter)."""
    async with running_root(store, tmp_path) as (root, _):
        await root.admission.tell(adm.PhaseChanged("job_unknown", "assigned", "org_x", "usr_y"))
        ledger = await root.admission.ask(adm.Ledger())
        assert ledger.per_org == {"org_x": 1} and ledger.on_node_per_org == {"org_x": 1}
        await root.admission.tell(adm.PhaseChanged("job_unknown", "succeeded", "org_x", "usr_y"))
        assert (await root.admission.ask(adm.Ledger())).live == 0


# helpers ----------------------------------------------------------------------------------


async def _all_in(runs: dict[str, int], job_ids: list[str]) -> bool:
    await trio.lowlevel.checkpoint()
    return all(j in runs for j in job_ids)


async def _count_in(runs: dict[str, int], job_ids: list[str], n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return sum(j in runs for j in job_ids) == n


async def _eq(value: Awaitable[Any], expected: Any) -> bool:
    return bool(await value == expected)


async def _gt(value: Awaitable[int], floor: int) -> bool:
    return await value > floor


async def _live_is(root: Root, n: int) -> bool:
    return (await root.admission.ask(adm.Ledger())).live == n
