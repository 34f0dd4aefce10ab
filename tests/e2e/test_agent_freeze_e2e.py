"""A frozen agent does not start the orders it held (found by ``bench chaos``).

An agent stopped (SIGSTOP, a suspended VM) past its server's heartbeat grace is taken for
lost: the server requeues what it had sent it. The run orders sent meanwhile sit in the
agent's socket buffer; before, the agent read them when it ran again and started those
attempts, after the server had given the job to another attempt (the soak saw attempt 1
start seconds after attempt 2 had succeeded on another node). Now the agent sees its own
clock jumped (``runplane/agent/session.py`` ``Frozen``), drops that connection without
acting on what it read, says hello again, and the job runs once, as a later attempt.
"""

from __future__ import annotations

import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from .conftest import (
    LiveServer,
    StartAgent,
    e2e_settings,
    job,
    node_status,
    online_nodes,
    saved_credential,
    start_server,
    submit,
    wait_for,
    wait_phase,
)

HEARTBEAT_SEC = 1.0  # the server takes a node for lost after 3 missed beats


@pytest.fixture
async def server(nursery: trio.Nursery, data_dir: Path) -> AsyncIterator[LiveServer]:
    live = await start_server(nursery, e2e_settings(data_dir), heartbeat_sec=HEARTBEAT_SEC)
    yield live
    live.stop.set()
    await live.done.wait()


@pytest.fixture
def ledger(shared: Path) -> Path:
    """A file every job uid may append to."""
    path = shared / "ledger"
    path.touch()
    path.chmod(0o666)
    return path


async def test_a_frozen_agent_drops_the_orders_it_held_and_the_job_runs_once(
    server: LiveServer, start_agent: StartAgent, ledger: Path
) -> None:
    agent = start_agent(server.url, "frozen")
    async with server.client() as client:
        (node,) = await wait_for(lambda: online_nodes(client), 30, "the agent online")
        await saved_credential(agent)
        os.kill(agent.proc.pid, signal.SIGSTOP)  # the agent only: its socket stays open
        try:
            # the node is still online: the run order goes out and waits in the socket
            script = f'echo "$RUNPLANE_JOB_ID $(basename "$PWD")" >> {ledger}'
            job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", script]})

            async def lost() -> bool:
                return await node_status(client, node["id"]) != "online"

            await wait_for(lost, 30, "the frozen node taken for lost")
            await trio.sleep(2 * HEARTBEAT_SEC)  # past the agent's own limit too
        finally:
            os.kill(agent.proc.pid, signal.SIGCONT)
        view = await wait_phase(client, job_id, "succeeded", within=60)
        await trio.sleep(3)  # a stale attempt, were it started, would write by now
        lines = (await trio.Path(ledger).read_text()).splitlines()
        attempts = [line.split()[1] for line in lines]
        assert attempts == [str(view["attempt"])], (lines, view)
        assert view["attempt"] > 1, view  # attempt 1 was the order the frozen agent held
        log = await trio.Path(agent.log).read_text()
        assert "this agent was frozen" in log, log[-3000:]
        assert (await job(client, job_id))["phase"] == "succeeded"
