"""End-to-end fixtures: the real app served by hypercorn on a loopback port, and real
agent processes (`python -m runplane agent`) connected to it over WebSocket."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypercorn.trio import serve

from runplane.agent import credentials
from runplane.http.app import create_app
from runplane.http.serving import Config  # the serving config `runplane serve` uses
from runplane.settings import Settings, load_settings

ADMIN = "e2e-admin-token-0123456789"


@dataclass
class LiveServer:
    url: str
    app: Any
    stop: trio.Event
    done: trio.Event = field(default_factory=trio.Event)

    def client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30)

    @property
    def root(self) -> Any:
        return self.app.extensions["runplane"].root


def e2e_settings(data_dir: Path, **env: str) -> Settings:
    base = {
        "RUNPLANE_DATA_DIR": str(data_dir),
        "RUNPLANE_LOCAL_AGENT": "0",
        "RUNPLANE_ADMIN_TOKEN": ADMIN,
    }
    base.update({f"RUNPLANE_{k.upper()}": v for k, v in env.items()})
    return load_settings(base)


async def start_server(
    nursery: trio.Nursery, settings: Settings, *, port: int = 0, **root: Any
) -> LiveServer:
    app = create_app(settings, **root)
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.graceful_timeout = 2
    stop = trio.Event()
    server_done = trio.Event()

    async def run(task_status: trio.TaskStatus[list[str]]) -> None:
        try:
            await serve(app, config, shutdown_trigger=stop.wait, task_status=task_status)
        finally:
            server_done.set()

    urls = await nursery.start(run)
    return LiveServer(url=urls[0], app=app, stop=stop, done=server_done)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "server"


@pytest.fixture
async def server(nursery: trio.Nursery, data_dir: Path) -> AsyncIterator[LiveServer]:
    live = await start_server(nursery, e2e_settings(data_dir), heartbeat_sec=0.5)
    yield live
    live.stop.set()
    await live.done.wait()


@dataclass
class AgentProcess:
    proc: subprocess.Popen[bytes]
    data_dir: Path
    log: Path

    @property
    def credential_file(self) -> Path:
        return self.data_dir / credentials.CREDENTIAL_FILE

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def terminate(self, timeout: float = 30) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[Callable[..., AgentProcess]]:
    agents: list[AgentProcess] = []

    def start(url: str, name: str, *extra: str) -> AgentProcess:
        data = tmp_path / f"agent-{name}"
        log = tmp_path / f"agent-{name}.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runplane",
                "agent",
                "--server",
                url,
                "--data-dir",
                str(data),
                "--name",
                name,
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=log.open("wb"),
            env=env,
            start_new_session=True,
        )
        agent = AgentProcess(proc, data, log)
        agents.append(agent)
        return agent

    yield start
    for agent in agents:
        agent.kill()


async def wait_for(predicate: Callable[[], Any], within: float = 30, what: str = "") -> Any:
    """Poll an async predicate until it returns something truthy (real time, bounded)."""
    with trio.move_on_after(within):
        while True:
            value = await predicate()
            if value:
                return value
            await trio.sleep(0.05)
    raise AssertionError(f"timed out after {within} s waiting for {what or predicate}")


async def saved_credential(agent: AgentProcess, within: float = 30) -> str:
    """Wait until ``agent`` has saved its node credential; return it.

    The server lists a node as online once it has sent the welcome; the agent writes the
    credential that welcome carries right after, in its own time. A test that stops an
    agent to start it again, or reads its credential, waits for the file first: an agent
    stopped before it saved the credential comes back without one and enrolls as a new
    node (the flake seen under load).
    """

    async def saved() -> str | None:
        return credentials.load_credential(agent.data_dir)

    return str(await wait_for(saved, within, f"the agent to save {agent.credential_file}"))


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """A ``--work-dir`` the job user can reach (pytest's tmp_path is under a 0700 dir)."""
    top = Path(tempfile.mkdtemp(prefix="runplane-e2e-work-"))
    top.chmod(0o711)
    yield top / "jobs"
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def shared() -> Iterator[Path]:
    """A directory every job can write: jobs run as uids of their own (or the node's job
    user), and pytest's tmp_path is under a 0700 directory; world-writable and sticky,
    like /tmp."""
    top = Path(tempfile.mkdtemp(prefix="runplane-e2e-shared-"))
    top.chmod(0o1777)
    yield top
    shutil.rmtree(top, ignore_errors=True)


async def node_status(client: httpx.AsyncClient, node_id: str) -> str:
    """The ``status`` of node ``node_id`` in ``GET /v1/nodes``."""
    nodes = {n["id"]: n for n in (await client.get("/v1/nodes")).json()}
    return str(nodes[node_id]["status"])


async def job_logs(client: httpx.AsyncClient, job_id: str, stream: str) -> list[str]:
    """The lines of one stream of a job's log (up to 1,000)."""
    body = (await client.get(f"/v1/jobs/{job_id}/logs?stream={stream}&limit=1000")).json()
    return [e["line"] for e in body["logs"]]


async def job(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    response = await client.get(f"/v1/jobs/{job_id}")
    response.raise_for_status()
    return response.json()


async def wait_phase(
    client: httpx.AsyncClient, job_id: str, *phases: str, within: float = 60
) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        view = await job(client, job_id)
        return view if view["phase"] in phases else None

    return await wait_for(check, within, f"{job_id} to reach {phases}")


StartAgent = Callable[..., AgentProcess]


async def submit(client: httpx.AsyncClient, body: dict[str, Any]) -> str:
    """Submit a job, insist on 202, return its id."""
    response = await client.post("/v1/jobs", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


async def online_nodes(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    nodes = (await client.get("/v1/nodes")).json()
    return [n for n in nodes if n["status"] == "online"]
