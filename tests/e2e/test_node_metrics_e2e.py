"""Node metrics with a real agent: the sampler's rows show a running job's committed load,
then the node idle again; a bad window is 400, an unknown node 404."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from .conftest import StartAgent, e2e_settings, online_nodes, start_server, wait_for


async def test_node_metrics_reflect_a_running_job(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    server = await start_server(
        nursery, e2e_settings(tmp_path / "server"), heartbeat_sec=0.5, node_sample_sec=0.2
    )
    start_agent(server.url, "sampled", "--max-concurrency", "2")
    async with server.client() as client:
        node = (await wait_for(lambda: online_nodes(client), 30, "the agent"))[0]
        url = f"/v1/nodes/{node['id']}/metrics"
        job = await client.post(
            "/v1/jobs",
            json={"stack": "shell", "command": ["sleep", "3"], "limits": {"cpu_cores": 1}},
        )
        job_id = job.json()["job_id"]

        async def busy() -> dict[str, Any] | None:
            body = (await client.get(url + "?window=15m")).json()
            hot = [s for s in body["samples"] if s["jobs"] == 1]
            return body if hot else None

        body = await wait_for(busy, 30, "a sample with the running job")
        assert body["node_id"] == node["id"] and body["window"] == "15m"
        assert (body["max_cpu"], body["max_slots"]) == (node["cpu_cores"], 2)
        hot = next(s for s in body["samples"] if s["jobs"] == 1)
        assert hot["cpu"] == 1 and hot["load"] >= 0.5  # one of two slots: at least half
        assert all(
            a["ts"] < b["ts"] for a, b in zip(body["samples"], body["samples"][1:], strict=False)
        )

        async def idle_again() -> bool:
            view = (await client.get(f"/v1/jobs/{job_id}")).json()
            if view["phase"] != "succeeded":
                return False
            samples = (await client.get(url)).json()["samples"]
            return bool(samples) and samples[-1]["jobs"] == 0

        await wait_for(idle_again, 30, "an idle sample after the job")
        assert (await client.get(url + "?window=25h")).status_code == 400
        assert (await client.get(url + "?window=soon")).status_code == 400
        assert (await client.get("/v1/nodes/node_nope/metrics")).status_code == 404
    server.stop.set()
    await server.done.wait()
