"""`RUNPLANE_AUTH=required` end to end, over a real port: an agent enrolls with a join
token through the (public) agent WebSocket, a member token submits a job that runs, a
browser-style EventSource follows it with ``?token=``, and no secret reaches a log line."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import trio

from runplane.logs import JsonFormatter
from tests.e2e.conftest import (
    ADMIN,
    LiveServer,
    StartAgent,
    e2e_settings,
    start_server,
    wait_for,
)

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}


@pytest.fixture
async def server(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[LiveServer]:
    live = await start_server(
        nursery, e2e_settings(tmp_path / "server", auth="required"), heartbeat_sec=0.5
    )
    yield live
    live.stop.set()
    await live.done.wait()


async def test_required_mode_end_to_end(
    server: LiveServer, start_agent: StartAgent, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        async with server.client() as client:
            assert (await client.get("/v1/jobs")).status_code == 401
            join = (await client.post("/v1/nodes/join-tokens", json={}, headers=ADMIN_H)).json()
            start_agent(server.url, "box", "--join-token", join["token"])
            minted = await client.post(
                "/v1/auth/tokens",
                json={"subject": "ci", "org_id": "org_acme", "role": "member"},
                headers=ADMIN_H,
            )
            token = minted.json()["token"]
            member = {"Authorization": f"Bearer {token}"}

            async def nodes() -> list[dict[str, object]]:
                response = await client.get("/v1/nodes", headers=member)
                return [n for n in response.json() if n["status"] == "online"]

            await wait_for(nodes, 30, "the agent")
            submitted = await client.post(
                "/v1/jobs",
                json={"stack": "shell", "command": ["echo", "hello from acme"]},
                headers=member,
            )
            assert submitted.status_code == 202, submitted.text
            job = submitted.json()
            assert job["org_id"] == "org_acme"
            frames = []
            async with httpx.AsyncClient(base_url=server.url, timeout=60) as browser:
                url = f"/v1/jobs/{job['job_id']}/events?token={token}"
                async with browser.stream("GET", url) as stream:
                    assert stream.status_code == 200
                    async for line in stream.aiter_lines():
                        frames.append(line)
            text = "\n".join(frames)
            assert "hello from acme" in text and '"phase":"succeeded"' in text
            # the same id through another org's eyes is an unknown id
            other = await client.post(
                "/v1/auth/tokens", json={"subject": "b", "org_id": "org_beta"}, headers=ADMIN_H
            )
            beta = {"Authorization": f"Bearer {other.json()['token']}"}
            assert (await client.get(f"/v1/jobs/{job['job_id']}", headers=beta)).status_code == 404
            assert await online_nodes_as(client, beta)  # the fleet is shared
    # the server's lines (httpx here is the test's own client, which logs its URLs)
    server_records = [r for r in caplog.records if r.name.startswith(("runplane", "hypercorn"))]
    lines = [JsonFormatter().format(record) for record in server_records]
    assert any('"msg":"request"' in line for line in lines)
    for secret in (token, join["token"], ADMIN):
        assert not [line for line in lines if secret in line]


async def online_nodes_as(client: httpx.AsyncClient, headers: dict[str, str]) -> list[object]:
    response = await client.get("/v1/nodes", headers=headers)
    assert response.status_code == 200
    return [n for n in response.json() if n["status"] == "online"]
