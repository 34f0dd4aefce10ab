"""A node's job turnover through the server's in-process agent (``runplane serve`` with
``RUNPLANE_LOCAL_AGENT=1``), as its own process: its slots come from
``RUNPLANE_LOCAL_AGENT_MAX_CONCURRENCY``, and a job waiting for the only slot runs once the
one holding it has finished (its release frees the slot; no heartbeat needed), in order."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.e2e.conftest import ADMIN, online_nodes, submit, wait_for, wait_phase
from tests.e2e.test_webhooks_e2e import _free_port

HEADERS = {"Authorization": f"Bearer {ADMIN}"}


def _serve(data_dir: Path, log: Path, port: int, slots: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    env.update(
        RUNPLANE_DATA_DIR=str(data_dir),
        RUNPLANE_ADMIN_TOKEN=ADMIN,
        RUNPLANE_LOCAL_AGENT="1",
        RUNPLANE_LOCAL_AGENT_MAX_CONCURRENCY=str(slots),
        RUNPLANE_MAX_CONCURRENT_ORG="0",
    )
    argv = [sys.executable, "-m", "runplane", "serve", "--port", str(port)]
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=log.open("ab"))


def _at(job: dict[str, Any], field: str) -> datetime:
    return datetime.fromisoformat(str(job[field]).replace("Z", "+00:00"))


async def test_one_slot_runs_the_waiting_job_after_the_first_finishes(tmp_path: Path) -> None:
    port = _free_port()
    proc = _serve(tmp_path / "server", tmp_path / "serve.log", port, slots=1)
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", headers=HEADERS, timeout=30
        ) as client:

            async def attached() -> list[dict[str, Any]] | None:
                assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-2000:]
                try:
                    nodes = await online_nodes(client)
                except httpx.TransportError:
                    return None
                return nodes or None

            nodes = await wait_for(attached, 60, "the local agent to attach")
            assert [n["max_concurrency"] for n in nodes] == [1]
            # the first holds the only slot a while; the second waits for it
            first = await submit(client, {"stack": "shell", "command": ["sleep", "2"]})
            second = await submit(client, {"stack": "shell", "command": ["true"]})
            done_first = await wait_phase(client, first, "succeeded", within=60)
            done_second = await wait_phase(client, second, "succeeded", within=60)
            assert _at(done_second, "started_at") >= _at(done_first, "finished_at")
    finally:
        proc.terminate()
        try:
            await trio.to_thread.run_sync(proc.wait, 30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
