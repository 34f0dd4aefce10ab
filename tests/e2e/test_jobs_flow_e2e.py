"""More of the job flow over real sockets and processes: priority order, a flood of log
lines, a server restart under a running job, and the node view."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from runplane.actors.job import LOG_CAP

from .conftest import (
    LiveServer,
    StartAgent,
    e2e_settings,
    online_nodes,
    start_server,
    submit,
    wait_for,
    wait_phase,
)


async def test_priority_reorders_the_queue_at_once(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "single", "--max-concurrency", "1")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        blocker = await submit(client, {"stack": "shell", "command": ["sleep", "1.5"]})
        await wait_phase(client, blocker, "running")
        queued = [await submit(client, {"stack": "shell", "command": ["true"]}) for _ in range(3)]
        last = queued[-1]
        raised = await client.post(f"/v1/jobs/{last}/priority", json={"priority": 1000})
        assert raised.json()["priority"] == 1000
        views = {j: await wait_phase(client, j, "succeeded", "failed") for j in queued}
        order = sorted(queued, key=lambda j: views[j]["started_at"])
        assert order[0] == last  # the raised job ran first once the slot freed
        assert order[1:] == queued[:2]  # the rest by age


async def test_a_flood_of_log_lines_is_capped_and_others_still_run(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "busy", "--max-concurrency", "2")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        flood = await submit(
            client,
            {
                "stack": "shell",
                "command": ["python3", "-c", "for i in range(100000): print('line', i)"],
            },
        )
        small = await submit(client, {"stack": "shell", "command": ["echo", "still here"]})
        small_view = await wait_phase(client, small, "succeeded", "failed")
        assert small_view["phase"] == "succeeded"
        view = await wait_phase(client, flood, "succeeded", "failed", within=120)
        assert view["phase"] == "succeeded", view
        truncated = view["log_truncated"]
        assert truncated["kept"] == LOG_CAP
        assert truncated["kept"] + truncated["dropped"] >= 100_000
        logs = (await client.get(f"/v1/jobs/{flood}/logs?stream=system&limit=100000")).json()
        notes = [e["line"] for e in logs["logs"] if "cap" in e["line"] or "truncated" in e["line"]]
        assert any(f"{LOG_CAP}" in n for n in notes), notes
        stdout = (await client.get(f"/v1/jobs/{flood}/logs?stream=stdout&limit=100000")).json()
        lines = [e["line"] for e in stdout["logs"]]
        assert lines[0] == "line 0"
        assert lines == [f"line {i}" for i in range(len(lines))]  # in order, no gap


async def test_server_restart_under_a_running_job_resumes_it(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    settings = e2e_settings(tmp_path / "resume")
    first = await start_server(nursery, settings, heartbeat_sec=0.5)
    port = int(first.url.rsplit(":", 1)[1])
    start_agent(first.url, "steady")
    async with first.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        job_id = await submit(
            client, {"stack": "shell", "command": ["sh", "-c", "sleep 3; echo survived"]}
        )
        running = await wait_phase(client, job_id, "running")
    first.stop.set()
    await first.done.wait()
    second = await start_server(nursery, settings, port=port, heartbeat_sec=0.5)
    try:
        async with second.client() as client:
            view = await wait_phase(client, job_id, "succeeded", "failed", within=60)
            assert view["phase"] == "succeeded", view
            assert view["attempts"] == 0  # resumed, not requeued
            assert view["node_id"] == running["node_id"]
            logs = (await client.get(f"/v1/jobs/{job_id}/logs?stream=stdout")).json()
            assert {"stream": "stdout", "line": "survived"} in logs["logs"]
    finally:
        second.stop.set()
        await second.done.wait()


async def test_node_view_shows_load_and_running_jobs(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "viewed", "--max-concurrency", "3", "--capability", "sim")
    async with server.client() as client:
        node = (await wait_for(lambda: online_nodes(client), 30, "the agent"))[0]
        assert node["name"] == "viewed" and node["max_concurrency"] == 3
        assert node["cpu_cores"] >= 1 and node["ram_gb"] >= 0 and node["arch"] and node["os"]
        assert node["tier"] == "community" and node["agent_version"]
        assert node["last_heartbeat"].endswith("Z")
        assert node["dlperf"] > 0 and node["reliability"] == 1.0
        job_id = await submit(
            client, {"stack": "shell", "command": ["sleep", "2"], "limits": {"cpu_cores": 1}}
        )
        await wait_phase(client, job_id, "running")
        busy = (await client.get("/v1/nodes")).json()[0]
        assert busy["active_jobs"] == 1 and busy["used_cpu"] == 1
        assert busy["running_jobs"] == [
            {"job_id": job_id, "stack": "shell", "phase": "running", "gpus": []}
        ]
        page = (await client.get("/v1/nodes?paginate=1&limit=1")).json()
        assert page["items"][0]["id"] == node["id"]
        assert page["has_more"] is False and page["next_cursor"] == ""
        assert (await client.get("/v1/nodes?paginate=1&limit=500")).status_code == 400
        await wait_phase(client, job_id, "succeeded")

        async def counted() -> dict[str, Any] | None:
            # the node's outcome counters follow the job's terminal phase (not atomically)
            node = (await client.get("/v1/nodes")).json()[0]
            return node if node["reputation"] > 0.5 else None

        idle = await wait_for(counted, 10, "the success counted on the node")
        assert idle["active_jobs"] == 0 and idle["running_jobs"] == []
