"""Jobs run for real: a served app, real agent processes over WebSocket, real processes."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import httpx
import trio

from .conftest import (
    AgentProcess,
    LiveServer,
    StartAgent,
    e2e_settings,
    online_nodes,
    start_server,
    submit,
    wait_for,
    wait_phase,
)


async def _one_agent(server: LiveServer, start_agent: StartAgent, *extra: str) -> AgentProcess:
    agent = start_agent(server.url, "a", *extra)
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
    return agent


def _sse_events(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.split("\n\n"):
        fields = dict(
            line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
        )
        if "data" in fields:
            data = json.loads(fields["data"])
            assert int(fields["id"]) == data["seq"]
            assert fields["event"] == data["kind"]
            events.append(data)
    return events


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(pid))
    return found


async def test_echo_succeeds_with_its_log_line(server: LiveServer, start_agent: StartAgent) -> None:
    await _one_agent(server, start_agent)
    async with server.client() as client:
        job_id = await submit(client, {"stack": "shell", "command": ["echo", "hello runplane"]})
        view = await wait_phase(client, job_id, "succeeded", "failed")
        assert view["phase"] == "succeeded", view
        assert view["started_at"] and view["finished_at"] and view["duration_ms"] >= 0
        assert view["node_id"].startswith("node_") and view["error"] == ""
        logs = (await client.get(f"/v1/jobs/{job_id}/logs?stream=stdout")).json()
        assert {"stream": "stdout", "line": "hello runplane"} in logs["logs"]


async def test_exit_code_fails_the_job(server: LiveServer, start_agent: StartAgent) -> None:
    await _one_agent(server, start_agent)
    async with server.client() as client:
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", "exit 3"]})
        view = await wait_phase(client, job_id, "succeeded", "failed")
        assert view["phase"] == "failed"
        assert "exit code 3" in view["error"]


async def test_timeout(server: LiveServer, start_agent: StartAgent) -> None:
    await _one_agent(server, start_agent)
    async with server.client() as client:
        job_id = await submit(
            client, {"stack": "shell", "command": ["sleep", "30"], "limits": {"timeout_sec": 1}}
        )
        view = await wait_phase(client, job_id, "timeout", "failed", "succeeded")
        assert view["phase"] == "timeout", view
        assert view["error"]


async def test_cancel_kills_the_process_tree(server: LiveServer, start_agent: StartAgent) -> None:
    await _one_agent(server, start_agent)
    marker = f"{600 + random.random():.6f}"
    async with server.client() as client:
        job_id = await submit(
            client,
            {"stack": "shell", "command": ["sh", "-c", f"sleep {marker} & sleep {marker}; wait"]},
        )
        await wait_phase(client, job_id, "running")
        await wait_for(lambda: _alive(marker), 30, "the job's processes to start")
        result = (await client.post(f"/v1/jobs/{job_id}/cancel")).json()
        assert result["cancelled"] is True and result["killed_on_node"] is True
        assert result["phase"] == "cancelled"
        await wait_for(lambda: _gone(marker), 30, "every process of the job to be gone")


async def _alive(marker: str) -> bool:
    return len(_processes_with(marker)) >= 2


async def _gone(marker: str) -> bool:
    return not _processes_with(marker)


async def test_metrics_reach_logs_sse_and_final_metrics(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await _one_agent(server, start_agent)
    script = (
        'echo \'::metric {"step": 1, "loss": 0.5}\'; '
        'echo \'::metric {"step": 2, "loss": 0.25, "acc": 0.9}\'; echo done'
    )
    async with server.client() as client:
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", script]})
        view = await wait_phase(client, job_id, "succeeded", "failed")
        assert view["phase"] == "succeeded", view
        assert view["final_metrics"] == {"loss": 0.25, "acc": 0.9}
        logs = (await client.get(f"/v1/jobs/{job_id}/logs")).json()
        assert logs["metrics"] == [
            {"step": 1, "values": {"loss": 0.5}},
            {"step": 2, "values": {"loss": 0.25, "acc": 0.9}},
        ]
        assert not any("::metric" in e["line"] for e in logs["logs"] if e["stream"] == "stdout")
        events = _sse_events((await client.get(f"/v1/jobs/{job_id}/events")).text)
        assert [e["values"] for e in events if e["kind"] == "metric"] == [
            {"loss": 0.5},
            {"loss": 0.25, "acc": 0.9},
        ]


async def test_sim_stack_runs_with_defaults(server: LiveServer, start_agent: StartAgent) -> None:
    await _one_agent(server, start_agent)
    async with server.client() as client:
        job_id = await submit(client, {"stack": "sim-cartpole", "config": {"episodes": 3}})
        view = await wait_phase(client, job_id, "succeeded", "failed")
        assert view["phase"] == "succeeded", view
        assert "reward" in view["final_metrics"]


async def test_sse_live_subscriber_then_late_subscriber(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await _one_agent(server, start_agent)
    async with server.client() as client:
        job_id = await submit(
            client, {"stack": "shell", "command": ["sh", "-c", "for i in 1 2 3; do echo $i; done"]}
        )
        live = (await client.get(f"/v1/jobs/{job_id}/events")).text  # held open until the end
        live_events = _sse_events(live)
        seqs = [e["seq"] for e in live_events]
        assert seqs == list(range(1, len(seqs) + 1))  # no gap, no repeat
        assert live_events[0] == {"kind": "phase", "job_id": job_id, "seq": 1, "phase": "queued"}
        assert live_events[-1]["kind"] == "phase" and live_events[-1]["phase"] == "succeeded"
        lines = [e["line"] for e in live_events if e["kind"] == "log" and e["stream"] == "stdout"]
        assert lines == ["1", "2", "3"]
        late = _sse_events((await client.get(f"/v1/jobs/{job_id}/events")).text)
        assert late == live_events
        resumed = (
            await client.get(f"/v1/jobs/{job_id}/events", headers={"Last-Event-ID": str(seqs[2])})
        ).text
        assert _sse_events(resumed) == live_events[3:]


async def test_two_agents_get_the_jobs_they_fit(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "plain", "--max-concurrency", "1")
    start_agent(server.url, "sim", "--max-concurrency", "4", "--capability", "simulator")
    async with server.client() as client:
        nodes = await wait_for(lambda: _online_by_name(client, 2), 30, "both agents to come online")
        needs_sim = [
            await submit(
                client,
                {
                    "stack": "shell",
                    "command": ["true"],
                    "requires": {"capabilities": ["simulator"]},
                },
            )
            for _ in range(3)
        ]
        views = [await wait_phase(client, j, "succeeded", "failed") for j in needs_sim]
        assert {v["node_id"] for v in views} == {nodes["sim"]}
        impossible = await submit(
            client, {"stack": "shell", "requires": {"capabilities": ["quantum"]}}
        )
        waiting = await wait_for(lambda: _wait_reason(client, impossible), 10, "a wait reason")
        assert "quantum" in waiting


async def _online_by_name(client: httpx.AsyncClient, count: int) -> dict[str, str] | None:
    nodes = await online_nodes(client)
    return {n["name"]: n["id"] for n in nodes} if len(nodes) >= count else None


async def _wait_reason(client: httpx.AsyncClient, job_id: str) -> str | None:
    view = (await client.get(f"/v1/jobs/{job_id}")).json()
    return view.get("wait_reason")


async def test_killed_agent_requeues_job_to_the_other(
    server: LiveServer, start_agent: StartAgent
) -> None:
    first = start_agent(server.url, "first")
    async with server.client() as client:
        await wait_for(lambda: _online_by_name(client, 1), 30, "the first agent")
        job_id = await submit(
            client, {"stack": "shell", "command": ["sh", "-c", "sleep 2; echo finished"]}
        )
        running = await wait_phase(client, job_id, "running")
        first_node = running["node_id"]
        first.kill()  # SIGKILL: no goodbye, the server notices the silence
        start_agent(server.url, "second")
        view = await wait_phase(client, job_id, "succeeded", "failed", within=90)
        assert view["phase"] == "succeeded", view
        assert view["attempts"] == 1
        assert view["node_id"] != first_node
        nodes = {n["id"]: n for n in (await client.get("/v1/nodes")).json()}
        assert nodes[first_node]["status"] == "offline"
        assert nodes[first_node]["reliability"] < 1.0


async def test_server_restart_keeps_queued_jobs(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    settings = e2e_settings(tmp_path / "restart")
    first = await start_server(nursery, settings, heartbeat_sec=0.5)
    async with first.client() as client:
        ids = [
            await submit(client, {"stack": "shell", "command": ["echo", str(i)]}) for i in range(5)
        ]
    first.stop.set()
    await first.done.wait()
    second = await start_server(nursery, settings, heartbeat_sec=0.5)
    try:
        async with second.client() as client:
            listed = {j["job_id"]: j["phase"] for j in (await client.get("/v1/jobs")).json()}
            assert listed == dict.fromkeys(ids, "queued")
            start_agent(second.url, "after-restart")
            for job_id in ids:
                view = await wait_phase(client, job_id, "succeeded", "failed")
                assert view["phase"] == "succeeded", view
    finally:
        second.stop.set()
        await second.done.wait()
