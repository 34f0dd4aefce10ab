"""Stopping an agent drains it: real agent processes signalled like an operator would.

A job running when SIGTERM arrives finishes with its real outcome and the agent exits 0;
a job still running at the drain timeout is stopped and handed back, requeued with
``attempts == 1`` and an error naming the node's shutdown, and runs on another agent. No
job ends ``cancelled``. Nothing here waits on time: jobs wait for files the test creates.
"""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_websocket

from runplane.agent import protocol as p

from .conftest import (
    AgentProcess,
    LiveServer,
    StartAgent,
    job,
    node_status,
    online_nodes,
    submit,
    wait_for,
    wait_phase,
)


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """Where the test and its jobs leave files for each other: a root agent runs jobs as
    its job user, who cannot enter pytest's tmp_path (under a 0700 dir)."""
    top = Path(tempfile.mkdtemp(prefix="runplane-e2e-drain-"))
    top.chmod(0o777)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def records(agent: AgentProcess) -> list[dict[str, Any]]:
    return [json.loads(line) for line in agent.log.read_text().splitlines() if line.startswith("{")]


async def exited(agent: AgentProcess) -> int | None:
    await trio.lowlevel.checkpoint()
    return agent.proc.poll()


async def wait_exit(agent: AgentProcess, within: float = 60) -> int:
    async def done() -> bool:
        return await exited(agent) is not None

    await wait_for(done, within, "the agent to exit")
    code = agent.proc.poll()
    assert code is not None
    return code


async def test_a_job_running_at_sigterm_finishes_and_the_agent_exits_0(
    server: LiveServer, start_agent: StartAgent, shared_dir: Path
) -> None:
    agent = start_agent(server.url, "drained", "--drain-timeout", "30")
    go = shared_dir / "go"
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        script = f"while [ ! -e {go} ]; do sleep 0.05; done; echo finished"
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", script]})
        running = await wait_phase(client, job_id, "running")
        node_id = running["node_id"]

        agent.proc.send_signal(signal.SIGTERM)
        await wait_for(
            lambda: _is(node_status(client, node_id), "draining"), 30, "the node to drain"
        )
        go.touch()  # the job may finish: it is within the drain timeout
        assert await wait_exit(agent) == 0

        view = await wait_phase(client, job_id, "succeeded", "failed", "cancelled", "queued")
        assert view["phase"] == "succeeded", view
        assert view["attempts"] == 0 and view["error"] == ""
        assert await node_status(client, node_id) == "offline"  # at once, not after a grace
    msgs = [r["msg"] for r in records(agent)]
    assert msgs.index("stop requested") < msgs.index("draining") < msgs.index("drained")
    assert "handing back running jobs" not in msgs
    assert msgs[-1] == "agent stopped"


async def test_a_job_running_at_the_drain_timeout_is_requeued_and_runs_elsewhere(
    server: LiveServer, start_agent: StartAgent, shared_dir: Path
) -> None:
    first = start_agent(server.url, "first", "--drain-timeout", "1")
    ran = shared_dir / "ran-once"
    # the first attempt marks the file and runs "forever"; the next one finishes
    script = f"if [ -e {ran} ]; then echo second attempt; else touch {ran}; exec sleep 600; fi"
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the first agent")
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", script]})
        running = await wait_phase(client, job_id, "running")
        first_node = running["node_id"]
        await wait_for(lambda: _exists(ran), 30, "the first attempt to start its command")

        first.proc.send_signal(signal.SIGTERM)  # the job outlives the 1 s drain timeout
        assert await wait_exit(first) == 0
        queued = await wait_phase(client, job_id, "queued", "cancelled", "failed")
        assert queued["phase"] == "queued", queued
        assert queued["attempts"] == 1
        assert queued["error"] == f"node {first_node} shut down (agent drained; requeued)"
        assert queued["node_id"] == ""
        assert await node_status(client, first_node) == "offline"
        logs = (await client.get(f"/v1/jobs/{job_id}/logs?stream=system")).json()["logs"]
        assert any("agent shutting down (drain timeout of 1 s passed)" in e["line"] for e in logs)

        start_agent(server.url, "second")
        done = await wait_phase(client, job_id, "succeeded", "failed", "cancelled")
        assert done["phase"] == "succeeded", done
        assert done["node_id"] not in ("", first_node)
        assert done["attempts"] == 1 and done["error"] == ""
        stdout = (await client.get(f"/v1/jobs/{job_id}/logs?stream=stdout")).json()["logs"]
        assert [e["line"] for e in stdout] == ["second attempt"]
        assert (await job(client, job_id))["phase"] == "succeeded"
    msgs = [r["msg"] for r in records(first)]
    assert "handing back running jobs" in msgs and "job handed back" in msgs
    assert msgs[-1] == "agent stopped"


async def test_the_server_ignores_an_agent_message_of_an_unknown_type(
    server: LiveServer,
) -> None:
    """Forward compatibility: a newer agent's message type is logged and ignored, the
    session goes on (here a ``draining`` after it still takes the node out)."""
    url = server.url.replace("http://", "ws://") + "/v1/nodes/connect"
    hello = p.Hello(
        protocol=p.PROTOCOL_VERSION,
        agent_version="test",
        facts=p.Facts(name="raw", cpu_cores=1, ram_gb=1, arch="x86_64", os="linux"),
    )
    async with (
        server.client() as client,
        trio_websocket.open_websocket_url(url) as ws,
    ):
        await ws.send_message(p.encode(hello))
        welcome = p.decode_server(await ws.get_message())
        assert isinstance(welcome, p.Welcome)
        await ws.send_message(json.dumps({"type": "from_the_future", "anything": [1, 2]}))
        await ws.send_message(p.encode(p.Draining(deadline_sec=5)))
        await wait_for(
            lambda: _is(node_status(client, welcome.node_id), "draining"),
            30,
            "the node to drain",
        )
        assert not ws.closed


async def _is(value: Any, expected: str) -> bool:
    return bool(await value == expected)


async def _exists(path: Path) -> bool:
    return await trio.Path(path).exists()


async def test_a_run_the_node_declines_goes_back_without_counting_as_lost(
    server: LiveServer,
) -> None:
    """An agent that declines a run before starting anything (its GPU still held by an
    ending job) hands it back with ``declined``: the job is queued again, not counted as
    a requeue, and the node's lost-attempt count stays 0."""
    url = server.url.replace("http://", "ws://") + "/v1/nodes/connect"
    hello = p.Hello(
        protocol=p.PROTOCOL_VERSION,
        agent_version="test",
        facts=p.Facts(name="raw", cpu_cores=2, ram_gb=4, arch="x86_64", os="linux"),
    )
    async with (
        server.client() as client,
        trio_websocket.open_websocket_url(url) as ws,
    ):
        await ws.send_message(p.encode(hello))
        welcome = p.decode_server(await ws.get_message())
        assert isinstance(welcome, p.Welcome)
        response = await client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})
        job_id = response.json()["job_id"]
        while True:
            run = p.decode_server(await ws.get_message())
            if isinstance(run, p.Run):
                break
        assert run.job_id == job_id
        await ws.send_message(
            p.encode(p.JobReleased(job_id=job_id, attempt=run.attempt, declined="no GPU free"))
        )
        with trio.fail_after(30):  # it comes back to this node (the only one) as attempt 2
            while True:
                again = p.decode_server(await ws.get_message())
                if isinstance(again, p.Run):
                    break
        assert (again.job_id, again.attempt) == (job_id, run.attempt + 1)
        view = await job(client, job_id)
        assert view["attempts"] == 0  # not a requeue counted against the job
        system = (await client.get(f"/v1/jobs/{job_id}/logs?stream=system")).json()["logs"]
        assert any("node declined it: no GPU free" in e["line"] for e in system)
        row = await server.root.store.fetchone(
            "SELECT attempts_lost FROM nodes WHERE id = ?", (welcome.node_id,)
        )
        assert row is not None and (row["attempts_lost"] or 0) == 0
