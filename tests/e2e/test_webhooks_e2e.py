"""Outgoing webhooks end to end: runs on a real agent process end succeeded, failed and
cancelled, and a receiver on loopback gets exactly one signed message per matching
endpoint; a server process SIGKILLed between a failed attempt and its retry delivers
after it is started again (docs/webhooks.md)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import trio

from runplane.webhooks import signing
from tests.e2e.conftest import (
    ADMIN,
    StartAgent,
    e2e_settings,
    online_nodes,
    start_server,
    submit,
    wait_for,
    wait_phase,
)
from tests.webhook_receiver import Receiver

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}


async def make_hook(client: httpx.AsyncClient, url: str, org: str, **body: Any) -> dict[str, Any]:
    response = await client.post(
        "/v1/webhooks", json={"url": url, "org_id": org, **body}, headers=ADMIN_H
    )
    assert response.status_code == 201, response.text
    return dict(response.json())


async def test_each_run_end_is_one_signed_delivery_per_matching_endpoint(
    nursery: trio.Nursery, data_dir: Path, start_agent: StartAgent
) -> None:
    server = await start_server(
        nursery, e2e_settings(data_dir, egress_allow="127.0.0.1"), heartbeat_sec=0.5
    )
    every = await Receiver.start(nursery)
    failures = await Receiver.start(nursery)
    elsewhere = await Receiver.start(nursery)
    start_agent(server.url, "hooked")
    async with server.client() as client:
        all_hook = await make_hook(client, every.url(), "org_default")
        failed_hook = await make_hook(client, failures.url(), "org_default", events=["run.failed"])
        await make_hook(client, elsewhere.url(), "org_other")  # another org's runs only
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        ok = await submit(client, {"stack": "shell", "command": ["true"]})
        bad = await submit(client, {"stack": "shell", "command": ["sh", "-c", "exit 3"]})
        slow = await submit(client, {"stack": "shell", "command": ["sleep", "60"]})
        await wait_phase(client, slow, "running")
        assert (await client.post(f"/v1/jobs/{slow}/cancel")).status_code == 200
        for job_id in (ok, bad, slow):
            await wait_phase(client, job_id, "succeeded", "failed", "cancelled")

        got = await every.wait_for(3)
        await failures.wait_for(1)
        with trio.move_on_after(1.0):  # nothing more comes
            await every.wait_for(4)
        assert len(every.received) == 3 and len(failures.received) == 1
        assert elsewhere.received == []
        now = time.time()
        assert all(r.verified(all_hook["secret"], now) for r in got)
        assert failures.received[0].verified(failed_hook["secret"], now)
        assert not got[0].verified(failed_hook["secret"], now)  # each endpoint its own key
        bodies = {json.loads(r.body)["run"]["id"]: json.loads(r.body) for r in got}
        assert bodies[ok]["event"] == "run.succeeded"
        assert bodies[bad]["event"] == "run.failed"
        assert bodies[slow]["event"] == "run.cancelled"
        assert (
            bodies[bad]["run"]["phase"] == "failed"
            and bodies[bad]["run"]["org_id"] == "org_default"
        )
        assert json.loads(failures.received[0].body)["run"]["id"] == bad
        for r in got:
            assert r.headers["x-runplane-event"] == json.loads(r.body)["event"]
            assert r.headers["x-runplane-delivery"] == json.loads(r.body)["delivery_id"]

        listed = (
            await client.get(f"/v1/webhooks/{all_hook['id']}/deliveries", headers=ADMIN_H)
        ).json()
        assert sorted(d["job_id"] for d in listed) == sorted([ok, bad, slow])
        for d in listed:
            assert (d["status"], d["attempts"], d["response_code"], d["error"]) == (
                "delivered",
                1,
                200,
                "",
            )
        views = (await client.get("/v1/webhooks", headers=ADMIN_H)).json()
        assert all("secret" not in v for v in views) and len(views) == 3
    server.stop.set()
    await server.done.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ServeProcess:
    """``runplane serve`` as its own process (local agent on), to be SIGKILLed."""

    def __init__(self, data_dir: Path, log: Path, port: int) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
        env.update(
            RUNPLANE_DATA_DIR=str(data_dir),
            RUNPLANE_ADMIN_TOKEN=ADMIN,
            RUNPLANE_EGRESS_ALLOW="127.0.0.1",
            RUNPLANE_LOCAL_AGENT="1",
        )
        self.base = f"http://127.0.0.1:{port}"
        self.proc = subprocess_popen(
            [sys.executable, "-m", "runplane", "serve", "--port", str(port)], env, log
        )

    async def ready(self) -> None:
        async def up() -> bool:
            assert self.proc.poll() is None, "runplane serve exited"
            try:
                async with httpx.AsyncClient(base_url=self.base, timeout=2) as c:
                    return (await c.get("/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await wait_for(up, 30, "runplane serve to answer /healthz")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()


def subprocess_popen(argv: list[str], env: dict[str, str], log: Path) -> Any:
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log.open("ab"))


async def test_a_server_killed_between_attempts_delivers_after_restart(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    receiver = await Receiver.start(nursery, [500])
    data = tmp_path / "data"
    port = _free_port()
    first = ServeProcess(data, tmp_path / "serve.log", port)
    try:
        await first.ready()
        async with httpx.AsyncClient(base_url=first.base, timeout=30) as client:
            hook = await make_hook(client, receiver.url(), "org_default")
            await wait_for(lambda: online_nodes(client), 30, "the local agent")
            job_id = await submit(client, {"stack": "shell", "command": ["true"]})
            await receiver.wait_for(1)  # answered 500: the retry is due in about 5 s

            async def recorded() -> bool:
                listed = (
                    await client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=ADMIN_H)
                ).json()
                return bool(listed) and listed[0]["attempts"] == 1

            await wait_for(recorded, 10, "the failed attempt's record")
        first.kill()  # before the retry
        second = ServeProcess(data, tmp_path / "serve.log", port)
        try:
            await second.ready()
            got = await receiver.wait_for(2)
            assert got[1].headers["x-runplane-delivery"] == got[0].headers["x-runplane-delivery"]
            assert got[1].body == got[0].body
            assert json.loads(got[1].body)["run"]["id"] == job_id
            assert got[1].verified(hook["secret"], time.time())
            async with httpx.AsyncClient(base_url=second.base, timeout=30) as client:

                async def delivered() -> dict[str, Any] | None:
                    listed = (
                        await client.get(f"/v1/webhooks/{hook['id']}/deliveries", headers=ADMIN_H)
                    ).json()
                    return listed[0] if listed[0]["status"] == "delivered" else None

                row = await wait_for(delivered, 10, "the delivery after the restart")
                assert (row["attempts"], row["response_code"]) == (2, 200)
            with trio.move_on_after(1.0):
                await receiver.wait_for(3)
            assert len(receiver.received) == 2  # delivered once, not again
        finally:
            second.kill()
    finally:
        first.kill()
    assert signing.SECRET_PREFIX in hook["secret"]
