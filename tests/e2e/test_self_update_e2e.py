"""Agent self-update for real (docs/agent.md#self-update).

A real agent process runs from a virtual environment of its own (``wheels.make_venv``:
this checkout's package installed as a wheel, the project's ``.venv`` never touched). The
operator sets the channel target and asks for the update: the agent pip-installs the
bumped wheel from a local directory while its running job goes on, lets the job finish,
re-executes itself (same pid) and says hello with the new ``agent_version``. A version
pip cannot find fails the install: the old agent keeps running and the node's view says
why. An ``--auto-update`` agent follows its channel's target by itself. An update asked
for an offline node waits for its next hello (in-process agent, an install command that
fails on purpose).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from runplane import __version__
from runplane.agent.client import Agent
from runplane.agent.update import UpdatePlan
from tests.agent.workroot import reachable_work_dir

from . import wheels
from .conftest import ADMIN, LiveServer, job, submit, wait_for, wait_phase

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
NEW = re.sub(r"\+.*", "", __version__) + "+selfupdate.test"
MISSING = re.sub(r"\+.*", "", __version__) + "+not.in.the.index"


@dataclass
class UpdateEnv:
    python: Path
    old_wheel: Path
    index: Path  # holds the NEW wheel only
    cwd: Path  # not the checkout: `python -m runplane` must not import it from the cwd


@pytest.fixture(scope="module")
def update_env() -> Iterator[UpdateEnv]:
    top = Path(tempfile.mkdtemp(prefix="runplane-e2e-update-"))
    try:
        python = wheels.make_venv(top / "venv")
        old = wheels.build_wheel(__version__, top / "old")
        index = top / "index"
        wheels.build_wheel(NEW, index)
        cwd = top / "cwd"
        cwd.mkdir()
        yield UpdateEnv(python, old, index, cwd)
    finally:
        shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def shared() -> Iterator[Path]:
    top = Path(tempfile.mkdtemp(prefix="runplane-e2e-update-gate-"))
    top.chmod(0o777)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def fresh_env(update_env: UpdateEnv) -> UpdateEnv:
    """The venv back on the old version (a previous test may have updated it)."""
    wheels.pip_install(update_env.python, update_env.old_wheel)
    assert wheels.imported_version(update_env.python, update_env.cwd) == __version__
    return update_env


@pytest.fixture
def venv_agent(
    tmp_path: Path, fresh_env: UpdateEnv
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def start(url: str, name: str, *extra: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
        env["RUNPLANE_AGENT_UPDATE_PIP_ARGS"] = (
            f"--no-index --find-links {fresh_env.index} --no-deps"
        )
        argv = [str(fresh_env.python), "-m", "runplane", "agent", "--server", url]
        argv += ["--data-dir", str(tmp_path / f"agent-{name}"), "--name", name, *extra]
        proc = subprocess.Popen(
            argv,
            cwd=fresh_env.cwd,
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / f"agent-{name}.log").open("wb"),
            env=env,
            start_new_session=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


async def node_named(client: httpx.AsyncClient, name: str) -> dict[str, Any] | None:
    nodes = (await client.get("/v1/nodes")).json()
    return next((n for n in nodes if n["name"] == name), None)


async def wait_node(
    client: httpx.AsyncClient, name: str, check: Callable[[dict[str, Any]], bool], what: str
) -> dict[str, Any]:
    async def found() -> dict[str, Any] | None:
        node = await node_named(client, name)
        return node if node is not None and check(node) else None

    return await wait_for(found, 90, what)


async def set_target(client: httpx.AsyncClient, version: str) -> None:
    response = await client.post(
        "/v1/admin/channel-target", json={"channel": "stable", "version": version}, headers=ADMIN_H
    )
    assert response.status_code == 200, response.text
    assert response.json()["stable"] == version


async def ask_update(client: httpx.AsyncClient, node_id: str) -> httpx.Response:
    return await client.post(f"/v1/nodes/{node_id}/update", headers=ADMIN_H)


async def test_an_operator_update_upgrades_a_live_agent_after_its_job(
    server: LiveServer, venv_agent: Callable[..., subprocess.Popen[bytes]], shared: Path
) -> None:
    proc = venv_agent(server.url, "upd")
    async with server.client() as client:
        node = await wait_node(client, "upd", lambda n: n["status"] == "online", "online")
        assert node["agent_version"] == __version__
        assert node["auto_update"] is False

        # a version the index does not have: the install fails, the old agent goes on
        await set_target(client, MISSING)
        response = await ask_update(client, node["id"])
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["update_sent"] is True and result["up_to_date"] is False
        assert (result["current_version"], result["target_version"]) == (__version__, MISSING)
        failed = await wait_node(
            client, "upd", lambda n: n["update"]["phase"] == "failed", "the install to fail"
        )
        assert failed["update"]["version"] == MISSING
        assert "exited 1" in failed["update"]["error"]
        assert MISSING in failed["update"]["error"]  # pip's own reason, quoted
        assert failed["agent_version"] == __version__ and failed["status"] == "online"
        again = (await ask_update(client, node["id"])).json()
        assert "failed" in again["note"]

        # the real update, while a job runs: the job finishes first, on its first attempt
        gate = shared / "go"  # the job runs as the job user: not under tmp_path
        script = f"while [ ! -e {gate} ]; do sleep 0.05; done; echo finished"
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", script]})
        await wait_phase(client, job_id, "running")
        await set_target(client, NEW)
        response = await ask_update(client, node["id"])
        assert response.status_code == 200, response.text
        assert response.json()["update_sent"] is True
        # two messages, ``update_status installed`` then ``draining``: wait for both
        draining = await wait_node(
            client,
            "upd",
            lambda n: n["update"]["phase"] == "installed" and n["status"] == "draining",
            "the install, then the drain",
        )
        assert draining["agent_version"] == __version__  # waits for its job
        gate.touch()
        done = await wait_phase(client, job_id, "succeeded", "failed", "cancelled")
        assert done["phase"] == "succeeded" and done["attempts"] == 0, done

        updated = await wait_node(
            client,
            "upd",
            lambda n: n["agent_version"] == NEW and n["status"] == "online",
            "the agent to reconnect with the new version",
        )
        assert updated["id"] == node["id"]  # the same node, its credential kept
        assert updated["update"]["requested"] == ""  # the request is fulfilled
        assert proc.poll() is None  # re-executed in place: the same process
        assert wheels.imported_version(proc_python(proc), Path(tempfile.gettempdir())) == NEW

        # the updated agent runs jobs
        after = await submit(client, {"stack": "shell", "command": ["echo", "new agent"]})
        finished = await wait_phase(client, after, "succeeded", "failed")
        assert finished["phase"] == "succeeded" and finished["node_id"] == node["id"]

        # nothing left to do: 200 (connected), up to date, nothing sent
        response = await ask_update(client, node["id"])
        assert response.status_code == 200
        assert response.json()["up_to_date"] is True and response.json()["update_sent"] is False


def proc_python(proc: subprocess.Popen[bytes]) -> Path:
    args = proc.args
    assert isinstance(args, list)
    return Path(args[0])


async def test_an_auto_update_agent_follows_its_channel_target(
    server: LiveServer, venv_agent: Callable[..., subprocess.Popen[bytes]]
) -> None:
    proc = venv_agent(server.url, "auto", "--auto-update")
    async with server.client() as client:
        node = await wait_node(client, "auto", lambda n: n["status"] == "online", "online")
        assert node["auto_update"] is True and node["agent_version"] == __version__
        await set_target(client, NEW)  # no update request: the agent applies it itself
        updated = await wait_node(
            client,
            "auto",
            lambda n: n["agent_version"] == NEW and n["status"] == "online",
            "the agent to update itself",
        )
        assert updated["auto_update"] is True and proc.poll() is None


# --- an in-process agent: a pending request, delivered at the next hello ------------------


FAIL_CMD = ("sh", "-c", "echo cannot install $0 >&2; exit 3", "{version}")


@pytest.fixture
async def inproc(
    nursery: trio.Nursery, server: LiveServer, tmp_path: Path
) -> AsyncIterator[Callable[[], Agent]]:
    def make() -> Agent:
        return Agent(
            server.url,
            tmp_path / "inproc",
            name="inproc",
            enforce_limits=False,
            work_dir=reachable_work_dir(),
            update_plan=UpdatePlan(FAIL_CMD, 30.0),
        )

    yield make


async def test_an_update_for_an_offline_node_waits_for_its_next_hello(
    nursery: trio.Nursery, server: LiveServer, inproc: Callable[[], Agent]
) -> None:
    async with server.client() as client:
        first = inproc()
        node_id = await nursery.start(first.run)
        first.request_stop()
        await wait_node(client, "inproc", lambda n: n["status"] != "online", "offline")

        unknown = await ask_update(client, "node_nope")
        assert unknown.status_code == 404
        assert (await client.post(f"/v1/nodes/{node_id}/update")).status_code == 401

        no_target = await ask_update(client, node_id)
        assert no_target.status_code == 202
        assert no_target.json()["target_version"] == ""
        assert "POST /v1/admin/channel-target" in no_target.json()["note"]

        await set_target(client, NEW)
        queued = await ask_update(client, node_id)
        assert queued.status_code == 202
        body = queued.json()
        assert body["update_sent"] is False and body["target_version"] == NEW
        assert "offline" in body["note"]
        pending = await node_named(client, "inproc")
        assert pending is not None and pending["update"]["requested"] == NEW

        second = inproc()
        await nursery.start(second.run)
        failed = await wait_node(
            client, "inproc", lambda n: n["update"]["phase"] == "failed", "the install to fail"
        )
        assert failed["update"]["error"] == f"the install command exited 3: cannot install {NEW}"
        assert failed["agent_version"] == __version__ and failed["status"] == "online"
        assert second.restart_into is None
        # the agent keeps working
        ran = await submit(client, {"stack": "shell", "command": ["echo", "still here"]})
        assert (await wait_phase(client, ran, "succeeded", "failed"))["phase"] == "succeeded"
        # the audit trail has the requests
        audit = (await client.get("/v1/admin/audit?limit=500", headers=ADMIN_H)).json()
        asked = [e for e in audit if e["action"] == "nodes:update"]
        assert [e["resource_id"] for e in asked] == [node_id, node_id]
        assert asked[0]["after"]["target_version"] == NEW
        second.request_stop()
        view = await job(client, ran)
        assert view["node_id"] == node_id
