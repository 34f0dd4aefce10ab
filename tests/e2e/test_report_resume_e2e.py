"""Numbered agent reports on a live server, spoken over a raw WebSocket: the server says
``resume`` right after the welcome with the last numbered report it stored of each attempt
the hello lists, drops a report numbered at or below it (a resend of what it has), and
stores an unnumbered one (an agent from before numbering) as before (docs/agent.md
"Reports across a server crash").
"""

from __future__ import annotations

from typing import Any

import httpx
import trio
import trio_websocket

from runplane.agent import protocol as p
from runplane.jobs import repo

from .conftest import LiveServer, wait_for, wait_phase

FACTS = p.Facts(name="raw", cpu_cores=2, ram_gb=4, arch="x86_64", os="linux")


def _hello(credential: str | None = None, running: list[p.RunningJob] | None = None) -> p.Hello:
    return p.Hello(
        protocol=p.PROTOCOL_VERSION,
        agent_version="test",
        credential=credential,
        facts=FACTS,
        running=running or [],
    )


async def _session(ws: trio_websocket.WebSocketConnection, hello: p.Hello) -> tuple[Any, Any]:
    """Say hello; the welcome and the resume that follows it at once."""
    await ws.send_message(p.encode(hello))
    welcome = p.decode_server(await ws.get_message())
    resume = p.decode_server(await ws.get_message())
    assert isinstance(welcome, p.Welcome) and isinstance(resume, p.Resume), (welcome, resume)
    return welcome, resume


async def _run_order(ws: trio_websocket.WebSocketConnection) -> p.Run:
    with trio.fail_after(30):
        while True:
            msg = p.decode_server(await ws.get_message())
            if isinstance(msg, p.Run):
                return msg


async def _stdout(client: httpx.AsyncClient, job_id: str) -> list[str]:
    logs = (await client.get(f"/v1/jobs/{job_id}/logs?stream=stdout")).json()["logs"]
    return [e["line"] for e in logs]


async def test_the_server_resumes_numbered_reports_and_drops_what_it_has(
    server: LiveServer,
) -> None:
    url = server.url.replace("http://", "ws://") + "/v1/nodes/connect"
    async with server.client() as client:
        async with trio_websocket.open_websocket_url(url) as ws:
            welcome, resume = await _session(ws, _hello())
            assert resume.marks == []  # the hello listed nothing
            created = await client.post("/v1/jobs", json={"stack": "shell", "command": ["x"]})
            job_id = created.json()["job_id"]
            run = await _run_order(ws)
            key = {"job_id": job_id, "attempt": run.attempt}
            await ws.send_message(p.encode(p.JobPhase(**key, phase="running")))
            for n, line in ((1, "one"), (2, "two"), (2, "two resent")):
                await ws.send_message(p.encode(p.JobLogs(**key, lines=[("stdout", line)], n=n)))
            await ws.send_message(p.encode(p.JobMetric(**key, values={"loss": 0.5}, n=3)))
            await ws.send_message(p.encode(p.JobLogs(**key, lines=[("stdout", "bare")])))

            async def stored() -> bool:
                return await _stdout(client, job_id) == ["one", "two", "bare"]

            await wait_for(stored, 30, "the first reports stored")
        # the agent comes back (as after a server restart) and says it still runs the job
        held = [p.RunningJob(job_id=job_id, attempt=run.attempt)]
        async with trio_websocket.open_websocket_url(url) as ws:
            _, resume = await _session(ws, _hello(welcome.credential, held))
            assert resume.marks == [p.ReportMark(**key, n=3)]
            await ws.send_message(p.encode(p.JobMetric(**key, values={"loss": 9.0}, n=3)))
            await ws.send_message(p.encode(p.JobLogs(**key, lines=[("stdout", "four")], n=4)))
            finished = p.JobFinished(**key, outcome="succeeded", final_metrics={})
            await ws.send_message(p.encode(finished))
            done = await wait_phase(client, job_id, "succeeded", "failed")
        assert done["phase"] == "succeeded"
        assert await _stdout(client, job_id) == ["one", "two", "bare", "four"]
        assert done["final_metrics"] == {"loss": 0.5}  # the resent n=3 (9.0) was dropped
        points = await repo.events_after(server.root.store, job_id, 0, kinds=("metric",))
        assert len(points) == 1
