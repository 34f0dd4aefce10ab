"""The actor tree in process on a real store, and a node agent played by the test: the
harness of the actor tests that need jobs, nodes, placement and admission together.

A node agent is played through the node's session outbox (the orders it receives) and the
agent reports it sends to the job actors, exactly what the WebSocket handler does. No
sleeps are asserted on: each step waits for its outcome with a generous deadline.
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
from runplane.actors.job_messages import (
    JOBS,
    AgentFinished,
    AgentLogs,
    AgentMetric,
    AgentPhase,
    AgentStream,
)
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.jobs.spec import SubmitJobBody
from runplane.nodes.enrollment import NodeIdentity
from runplane.persistence import Store, open_store
from runplane.services.jobs import Submitter
from runplane.settings import load_settings
from runplane.stacks import load_catalog
from runplane.system import Root

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
    store: Store, tmp_path: Path, *, timing: dict[str, float] | None = None, **env: str
) -> AsyncIterator[tuple[Root, trio.Nursery]]:
    """The actor tree on ``store``, and a nursery for the test's agents (cancelled first);
    ``timing`` are Root's keyword arguments (``heartbeat_sec``, ``reconnect_grace_sec``)."""
    async with (
        _tree(store, tmp_path, timing or {}, **env) as root,
        trio.open_nursery() as agents,
    ):
        try:
            yield root, agents
        finally:
            agents.cancel_scope.cancel()


@asynccontextmanager
async def _tree(
    store: Store, tmp_path: Path, timing: dict[str, float], **env: str
) -> AsyncIterator[Root]:
    settings = load_settings(
        {
            "RUNPLANE_DATA_DIR": str(tmp_path / "data"),
            "RUNPLANE_LOCAL_AGENT": "0",
            **{f"RUNPLANE_{k.upper()}": v for k, v in env.items()},
        }
    )
    root = Root(settings, store, load_catalog(), **timing)
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

    #: what its hello reports; a simulated node runs nothing, so it enforces nothing
    capabilities: tuple[str, ...] = ("limits-best-effort",)
    #: the image cache its hello reports (a container node's), else none
    images: p.ImageFacts | None = None

    def __init__(self, root: Root, nursery: trio.Nursery, node_id: str, cpu: int) -> None:
        self.root = root
        self.nursery = nursery
        self.node_id = node_id
        self.cpu = cpu
        self.runs: dict[str, int] = {}  # job id -> attempt of each Run received
        self.cancels: list[str] = []
        self.teleops: list[p.Teleop] = []  # every Teleop received, in order
        #: answer each Teleop with this (ok, error); None: do not answer
        self.teleop_answer: tuple[bool, str | None] | None = (True, None)
        self._send, self._receive = trio.open_memory_channel[str](1024)

    async def connect(self) -> None:
        hello = p.Hello(
            protocol=p.PROTOCOL_VERSION,
            # what it still runs (after a server restart): the attempts it was given
            running=[p.RunningJob(job_id=j, attempt=a) for j, a in self.runs.items()],
            agent_version="test",
            facts=p.Facts(
                name=self.node_id,
                cpu_cores=self.cpu,
                ram_gb=64,
                arch="x86_64",
                os="linux",
                max_concurrency=8,
                capabilities=list(self.capabilities),
                images=self.images,
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
            elif isinstance(msg, p.Teleop):
                self.teleops.append(msg)
                if self.teleop_answer is not None:  # as the agent's teleop_ack does
                    ok, error = self.teleop_answer
                    key = (msg.job_id, msg.attempt, msg.stream, msg.seq)
                    self.root.teleop_acks.resolve(key, ok, error)

    async def report(self, job_id: str, msg: Any) -> Any:
        return await self.root.registry.ask(JOBS, job_id, msg)

    async def start(self, job_id: str) -> None:
        attempt = self.runs[job_id]
        await self.report(job_id, agent_phase(self.node_id, job_id, attempt, "pulling"))
        await self.report(job_id, agent_phase(self.node_id, job_id, attempt, "running"))

    async def finish(self, job_id: str, outcome: str = "succeeded") -> None:
        attempt = self.runs[job_id]
        done = agent_finished(self.node_id, job_id, attempt, outcome)
        assert await self.report(job_id, done) is True


# -- the agent's reports, as the WebSocket handler hands them to the job actor -------------


def agent_phase(
    node_id: str, job_id: str, attempt: int, phase: str, gpus: tuple[str, ...] = ()
) -> AgentPhase:
    report = p.JobPhase(job_id=job_id, attempt=attempt, phase=phase, gpus=list(gpus))  # type: ignore[arg-type]
    return AgentPhase(node_id, report)


def agent_logs(
    node_id: str,
    job_id: str,
    attempt: int,
    lines: tuple[tuple[str, ...], ...],
    n: int | None = None,
) -> AgentLogs:
    report = p.JobLogs(job_id=job_id, attempt=attempt, lines=list(lines), n=n)  # type: ignore[arg-type]
    return AgentLogs(node_id, report)


def agent_metric(
    node_id: str, job_id: str, attempt: int, values: dict[str, float], n: int | None = None
) -> AgentMetric:
    return AgentMetric(node_id, p.JobMetric(job_id=job_id, attempt=attempt, values=values, n=n))


def agent_finished(
    node_id: str,
    job_id: str,
    attempt: int,
    outcome: str = "succeeded",
    error: str | None = None,
    final_metrics: dict[str, float] | None = None,
    exit_code: int | None = None,
    signal: str | None = None,
) -> AgentFinished:
    report = p.JobFinished(
        job_id=job_id,
        attempt=attempt,
        outcome=outcome,  # type: ignore[arg-type]
        error=error,
        final_metrics=final_metrics or {},
        exit_code=exit_code,
        signal=signal,
    )
    return AgentFinished(node_id, report)


def agent_stream(
    node_id: str, job_id: str, attempt: int, stream: str, chunks: tuple[p.StreamChunkIn, ...]
) -> AgentStream:
    report = p.JobStream(job_id=job_id, attempt=attempt, stream=stream, chunks=list(chunks))
    return AgentStream(node_id, report)


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


async def all_in(runs: dict[str, int], job_ids: list[str]) -> bool:
    await trio.lowlevel.checkpoint()
    return all(j in runs for j in job_ids)


async def count_in(runs: dict[str, int], job_ids: list[str], n: int) -> bool:
    await trio.lowlevel.checkpoint()
    return sum(j in runs for j in job_ids) == n


async def equals(value: Awaitable[Any], expected: Any) -> bool:
    return bool(await value == expected)


async def greater(value: Awaitable[int], floor: int) -> bool:
    return await value > floor


async def live_is(root: Root, n: int) -> bool:
    return (await root.admission.ask(adm.Ledger())).live == n
