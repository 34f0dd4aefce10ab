"""Node overrides with a real agent: disabling drains the node (nothing new starts, until
it is enabled again), a CPU cap changes placement at once and holds across the agent
reconnecting and the server restarting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import trio

from .conftest import ADMIN, StartAgent, e2e_settings, online_nodes, start_server, wait_for

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}


async def one_node(client: httpx.AsyncClient) -> dict[str, Any]:
    nodes = await wait_for(lambda: online_nodes(client), 30, "the agent")
    return dict(nodes[0])


async def phase_of(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    return dict((await client.get(f"/v1/jobs/{job_id}")).json())


async def test_disable_drains_and_a_cpu_cap_holds_across_reconnect_and_restart(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    settings = e2e_settings(tmp_path / "server")
    server = await start_server(nursery, settings, heartbeat_sec=0.5)
    agent = start_agent(server.url, "patched", "--max-concurrency", "2")
    async with server.client() as client:
        node = await one_node(client)
        node_id, cores = node["id"], node["cpu_cores"]
        disabled = await client.patch(
            f"/v1/nodes/{node_id}", json={"disabled": True}, headers=ADMIN_H
        )
        assert disabled.status_code == 200, disabled.text
        assert disabled.json()["disabled"] is True
        job = (await client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})).json()

        async def explained() -> dict[str, Any] | None:
            view = await phase_of(client, job["job_id"])
            return view if "disabled" in str(view.get("wait_reason", "")) else None

        await wait_for(explained, 30, "the job to wait for the disabled node")
        enabled = await client.patch(
            f"/v1/nodes/{node_id}", json={"disabled": False}, headers=ADMIN_H
        )
        assert enabled.json()["disabled"] is False

        async def done() -> dict[str, Any] | None:
            view = await phase_of(client, job["job_id"])
            return view if view["phase"] in ("succeeded", "failed") else None

        assert (await wait_for(done, 60, "the job once enabled"))["phase"] == "succeeded"

        if cores < 2:
            return  # a 1-core machine cannot show a cap below a job's need
        capped = await client.patch(
            f"/v1/nodes/{node_id}", json={"cpu_cap": 1, "name": "capped-box"}, headers=ADMIN_H
        )
        assert capped.status_code == 200, capped.text
        assert (capped.json()["cpu_cores"], capped.json()["name"]) == (1, "capped-box")
        big = (
            await client.post(
                "/v1/jobs",
                json={"stack": "shell", "command": ["true"], "limits": {"cpu_cores": 2}},
            )
        ).json()

        async def too_big() -> dict[str, Any] | None:
            view = await phase_of(client, big["job_id"])
            return view if "2 CPU cores" in str(view.get("wait_reason", "")) else None

        await wait_for(too_big, 30, "the 2-core job to wait for the capped node")
        over = await client.patch(
            f"/v1/nodes/{node_id}", json={"cpu_cap": cores + 1}, headers=ADMIN_H
        )
        assert over.status_code == 400
        # the agent reconnects (a new process, the same credential): the cap holds
        agent.terminate()
        start_agent(server.url, "patched", "--max-concurrency", "2")
        node = await one_node(client)
        assert (node["cpu_cores"], node["name"]) == (1, "capped-box")
    server.stop.set()
    await server.done.wait()
    port = int(server.url.rsplit(":", 1)[1])
    again = await start_server(nursery, settings, port=port, heartbeat_sec=0.5)
    async with again.client() as client:
        node = await one_node(client)
        assert (node["cpu_cores"], node["name"]) == (1, "capped-box")
        still = await phase_of(client, big["job_id"])
        assert still["phase"] == "queued"
        lifted = await client.patch(f"/v1/nodes/{node_id}", json={"cpu_cap": 0}, headers=ADMIN_H)
        assert lifted.json()["cpu_cores"] == cores

        async def ran() -> dict[str, Any] | None:
            view = await phase_of(client, big["job_id"])
            return view if view["phase"] in ("succeeded", "failed") else None

        assert (await wait_for(ran, 60, "the 2-core job once the cap is lifted"))[
            "phase"
        ] == "succeeded"
    again.stop.set()
    await again.done.wait()
