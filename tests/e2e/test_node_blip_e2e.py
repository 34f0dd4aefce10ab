"""A node blip loses no work (#13 item 1), with a real agent process killed like a crash.

Before: with the only agent killed (node ``disconnected``, within its grace period), a job
submitted was ``failed`` within milliseconds, ``attempts: 3``, "lost its node 3 times
(last: node went away before the run order)", and never revived. Now it waits in the
queue with a reason, and runs when the agent comes back.
"""

from __future__ import annotations

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


@pytest.fixture
async def server(nursery: trio.Nursery, data_dir: Path) -> AsyncIterator[LiveServer]:
    # a grace period long enough to submit within it (3 missed beats)
    live = await start_server(nursery, e2e_settings(data_dir), heartbeat_sec=5)
    yield live
    live.stop.set()
    await live.done.wait()


async def test_a_job_submitted_while_the_only_node_is_disconnected_waits_and_then_runs(
    server: LiveServer, start_agent: StartAgent
) -> None:
    agent = start_agent(server.url, "blip")
    async with server.client() as client:
        (node,) = await wait_for(lambda: online_nodes(client), 30, "the agent online")
        await saved_credential(agent)  # it comes back as the same node
        agent.kill()  # kill -9: no drain, the socket just closes

        async def disconnected() -> bool:
            return await node_status(client, node["id"]) == "disconnected"

        await wait_for(disconnected, 10, "the node disconnected")
        job_id = await submit(client, {"stack": "shell", "command": ["echo", "after the blip"]})

        async def waits() -> dict[str, object] | None:
            view = await job(client, job_id)
            return view if view.get("wait_reason") else None

        waiting = await wait_for(waits, 10, "a wait reason")
        assert waiting["phase"] == "queued" and waiting["attempts"] == 0, waiting
        assert "no node is connected" in str(waiting["wait_reason"])
        assert await node_status(client, node["id"]) == "disconnected"  # still in its grace

        start_agent(server.url, "blip")  # the same data dir: the same node
        done = await wait_phase(client, job_id, "succeeded", "failed", within=60)
        assert done["phase"] == "succeeded", done
        assert done["attempts"] == 0 and done["node_id"] == node["id"], done
        logs = (await client.get(f"/v1/jobs/{job_id}/logs")).text
        assert "after the blip" in logs
