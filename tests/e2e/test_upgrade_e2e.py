"""Upgrades (docs/operations.md "Upgrading"), for real: a store built and filled by an
earlier release, then served by today's code.

The earlier release is the code AND migrations of commit ``OLD_RELEASE``, taken from this
repository's history with ``git archive`` (no checkout) and run as ``python -m runplane`` with
``PYTHONPATH`` on it, in this venv. Its server and a real agent of it fill the store through
its API: succeeded jobs with logs and artifacts using a sealed org secret, a failed job, a
job still running at the switch, a pipeline, a session, a schedule, a webhook, an API token.
Then the old server stops (SIGTERM) and today's `runplane serve` starts on the same data dir
(and database): the newer migrations apply, everything reads back, the running job goes on
(the old agent reconnects: docs/jobs.md "Restart"), secrets and the webhook's signing
secret still unseal, the schedule fires again, and today's agent, on the old agent's data
dir, is the same node and runs new jobs.

And the other direction: a server older than its store (a row of a migration it does not
know) exits 1 with one line naming both versions, the store left as it was."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from runplane import __version__
from runplane.persistence import DB_FILENAME, load_migrations, open_store
from tests.e2e.conftest import (
    ADMIN,
    AgentProcess,
    LiveServer,
    StartAgent,
    job,
    job_logs,
    online_nodes,
    submit,
    wait_for,
    wait_phase,
)
from tests.e2e.test_backup_e2e import VALUE, _job, fill
from tests.webhook_receiver import Receiver

#: The earlier release the upgrade test starts from: d73ef20 (2026-11-25) is the last
#: release before images, preemption and gangs; its store has migrations up to 0027, so
#: today's 0028-0031 apply on top of real data. Move it forward to the oldest release still
#: supported (the one before the last schema change at least) when a release is cut, and
#: say so in docs/operations.md "Upgrading".
OLD_RELEASE = "d73ef20"
OLD_SCHEMA = 27
REPO = Path(__file__).resolve().parents[2]
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
#: a job that prints, waits for the gate file (created by the test), prints again
GATED = 'echo before; while [ ! -e "$1" ]; do sleep 0.2; done; echo after'


def old_tree(dest: Path) -> Path:
    """The ``runplane`` package of ``OLD_RELEASE`` under ``dest`` (skip without history)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    has = subprocess.run(
        ["git", "-C", str(REPO), "cat-file", "-e", f"{OLD_RELEASE}^{{commit}}"],
        capture_output=True,
        check=False,
    )
    if has.returncode != 0:
        pytest.skip(f"commit {OLD_RELEASE} is not in this clone's history (a shallow clone?)")
    dest.mkdir(parents=True)
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", OLD_RELEASE, "runplane"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive.stdout, check=True)
    return dest


@contextmanager
def pythonpath(tree: Path | None) -> Iterator[None]:
    """``PYTHONPATH`` on ``tree`` (None: as it was) for the processes started meanwhile."""
    saved = {name: os.environ.get(name) for name in OLD_PATH}
    if tree is not None:
        os.environ.update(old_path(tree))
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def old_path(tree: Path) -> dict[str, str]:
    """The environment that makes ``python -m runplane`` import ``tree``'s package: on
    ``PYTHONPATH``, and not the working directory's first (``-m`` puts the cwd, perhaps a
    checkout of today's code, before ``PYTHONPATH``; PYTHONSAFEPATH leaves it out)."""
    return {"PYTHONPATH": str(tree), "PYTHONSAFEPATH": "1"}


OLD_PATH = ("PYTHONPATH", "PYTHONSAFEPATH")


@dataclass
class ServeProcess:
    proc: subprocess.Popen[bytes]
    url: str
    log: Path

    def as_live(self) -> LiveServer:
        """For the shared helpers, which only use ``url``/``client()``."""
        return LiveServer(url=self.url, app=None, stop=trio.Event())

    def client(self, **headers: str) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.url, timeout=30, headers=headers)

    async def stop(self) -> None:
        """SIGTERM; it must exit 0."""
        self.proc.send_signal(signal.SIGTERM)
        code = await trio.to_thread.run_sync(lambda: self.proc.wait(60))
        assert code == 0, _tail(self.log)


def server_env(data_dir: Path, url: str | None, tree: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    env.update(
        RUNPLANE_DATA_DIR=str(data_dir),
        RUNPLANE_LOCAL_AGENT="0",
        RUNPLANE_ADMIN_TOKEN=ADMIN,
        RUNPLANE_EGRESS_ALLOW="127.0.0.1",
    )
    if url:
        env["RUNPLANE_DATABASE_URL"] = url
    if tree is not None:
        env.update(old_path(tree))
    return env


#: every ``runplane serve`` a test started: the ones still running at its end are killed
_SPAWNED: list[subprocess.Popen[bytes]] = []


@pytest.fixture(autouse=True)
def _no_server_left() -> Iterator[None]:
    """A failed test leaves no server running (it would hold its port and data dir)."""
    yield
    while _SPAWNED:
        proc = _SPAWNED.pop()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _popen_serve(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "runplane", "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
        start_new_session=True,
    )
    _SPAWNED.append(proc)
    return proc


def _tail(log: Path) -> str:
    return log.read_text()[-4000:]


async def serve(env: dict[str, str], port: int, log: Path) -> ServeProcess:
    """``python -m runplane serve`` on ``port``, once it answers /healthz."""
    proc = _popen_serve(env, port, log)
    live = ServeProcess(proc, f"http://127.0.0.1:{port}", log)

    async def up() -> bool:
        assert proc.poll() is None, _tail(log)
        try:
            async with live.client() as client:
                return (await client.get("/healthz")).status_code == 200
        except httpx.TransportError:
            return False

    await wait_for(up, 60, f"runplane serve on port {port}")
    return live


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def gate_dir() -> Iterator[Path]:
    """Where the gate file goes: a job's own uid (a root agent's) can see into it."""
    top = Path(tempfile.mkdtemp(prefix="runplane-upgrade-"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@dataclass
class Filled:
    """What the old release wrote, to read back after the upgrade."""

    jobs: dict[str, Any]
    failed: str
    gated: str
    node_id: str
    pipeline: dict[str, Any]
    session: dict[str, Any]
    schedule_id: str
    schedule_runs: list[dict[str, Any]]
    hook: dict[str, Any]
    token: str
    user_session: str
    org_id: str


async def fill_old(
    old: ServeProcess, start_old_agent: StartAgent, receiver: Receiver, gate: Path
) -> Filled:
    """Everything, through the old server's API, run by the old agent."""
    jobs = await fill(old.as_live(), start_old_agent, "node")  # also puts the org secret
    async with old.client() as client:
        hook = await _post(
            client,
            "/v1/webhooks",
            {"url": receiver.url(), "org_id": "org_default", "events": ["run.failed"]},
        )
        failed = await submit(client, {"stack": "shell", "command": ["sh", "-c", "exit 3"]})
        assert (await wait_phase(client, failed, "failed"))["exit_code"] == 3
        await receiver.wait_for(1)
        pipeline = await _pipeline(client)
        session = await _session(client)
        schedule = await _post(
            client,
            "/v1/schedules",
            {"name": "tick", "every": "2s", "job": {"stack": "shell", "command": ["true"]}},
        )
        runs = await _runs(client, schedule["schedule_id"], 1)
        token = await _post(
            client, "/v1/auth/tokens", {"subject": "ci-bot", "kind": "service", "role": "member"}
        )
        user_session, org_id = await _org(client)
        gated = await submit(
            client, {"stack": "shell", "command": ["sh", "-c", GATED, "sh", str(gate)]}
        )
        await wait_for(lambda: _says(client, gated, "before"), 60, "the gated job to start")
        node_id = (await job(client, gated))["node_id"]
    return Filled(
        jobs, failed, gated, node_id, pipeline, session, schedule["schedule_id"], runs,
        hook, token["token"], user_session, org_id,
    )  # fmt: skip


async def _post(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, json=body, headers=ADMIN_H)
    assert response.status_code in (201, 202), (path, response.text)
    return dict(response.json())


async def _org(client: httpx.AsyncClient) -> tuple[str, str]:
    """A user (seated by the operator, logged in) and the org it created: its session
    token and the org's id."""
    seat = await _post(client, "/v1/auth/seat", {"email": "ada@example.com", "name": "Ada"})
    login = await client.post("/v1/auth/token", json={"token": seat["login_token"]})
    assert login.status_code == 200, login.text
    session = login.json()["session_token"]
    made = await client.post(
        "/v1/orgs", json={"name": "Lab"}, headers={"Authorization": f"Bearer {session}"}
    )
    assert made.status_code == 201, made.text
    return session, str(made.json()["id"])


async def _says(client: httpx.AsyncClient, job_id: str, line: str) -> bool:
    return line in await job_logs(client, job_id, "stdout")


async def _pipeline(client: httpx.AsyncClient) -> dict[str, Any]:
    def stage(name: str, *needs: str) -> dict[str, Any]:
        script = f"echo stage {name}"
        return {
            "name": name,
            "needs": list(needs),
            "stack": "shell",
            "command": ["sh", "-c", script],
        }

    run = await _post(
        client, "/v1/pipelines", {"name": "chain", "stages": [stage("a"), stage("b", "a")]}
    )

    async def done() -> dict[str, Any] | None:
        view = dict((await client.get(f"/v1/pipelines/{run['pipeline_run_id']}")).json())
        return view if view["status"] == "succeeded" else None

    return dict(await wait_for(done, 90, "the pipeline to succeed"))


async def _session(client: httpx.AsyncClient) -> dict[str, Any]:
    """A session that ran and was stopped."""
    service = {"name": "sim", "command": ["sleep", "300"]}
    made = await _post(client, "/v1/sessions", {"name": "pod", "pod": {"services": [service]}})
    sid = made["id"]

    async def phase(*phases: str) -> dict[str, Any] | None:
        view = dict((await client.get(f"/v1/sessions/{sid}")).json())
        return view if view["phase"] in phases else None

    await wait_for(lambda: phase("ready"), 60, "the session to be ready")
    assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 200
    return dict(await wait_for(lambda: phase("stopped"), 60, "the session to stop"))


async def _runs(client: httpx.AsyncClient, sid: str, at_least: int) -> list[dict[str, Any]]:
    async def enough() -> list[dict[str, Any]] | None:
        runs = (await client.get(f"/v1/schedules/{sid}")).json()["runs"]
        created = [r for r in runs if r["outcome"] == "created"]
        return runs if len(created) >= at_least else None

    return list(await wait_for(enough, 30, f"{at_least} runs of schedule {sid}"))


async def check_read_back(new: ServeProcess, before: Filled, receiver: Receiver) -> None:
    """Today's server holds what the old one wrote, and the old agent's job goes on."""
    async with new.client() as client:
        for job_id, held in before.jobs.items():
            view = await job(client, job_id)
            assert view["phase"] == "succeeded", view
            assert await job_logs(client, job_id, "stdout") == held["stdout"]
            for ref, sha in held["artifacts"].items():
                got = await client.get(ref)
                assert got.status_code == 200, (ref, got.text)
                assert hashlib.sha256(got.content).hexdigest() == sha
        failed = await job(client, before.failed)
        assert (failed["phase"], failed["exit_code"]) == ("failed", 3)
        pipeline = (await client.get(f"/v1/pipelines/{before.pipeline['pipeline_run_id']}")).json()
        assert _stages(pipeline) == _stages(before.pipeline) == {"a": "succeeded", "b": "succeeded"}
        session = (await client.get(f"/v1/sessions/{before.session['id']}")).json()
        assert (session["phase"], session["name"]) == ("stopped", "pod")
        hooks = (await client.get("/v1/webhooks", headers=ADMIN_H)).json()
        assert [h["id"] for h in hooks] == [before.hook["id"]]
        listed = (await client.get("/v1/secrets?org=org_default", headers=ADMIN_H)).json()
        assert [s["name"] for s in listed] == ["TOKEN"], listed
        orgs = await client.get(
            "/v1/orgs", headers={"Authorization": f"Bearer {before.user_session}"}
        )
        assert before.org_id in [m["org"]["id"] for m in orgs.json()], orgs.text
        me = await client.get(
            "/v1/auth/whoami", headers={"Authorization": f"Bearer {before.token}"}
        )
        assert me.json()["subject"] == "ci-bot", me.text
        # the running job: its node reconnects and it goes on, the same attempt
        await wait_for(lambda: online_nodes(client), 60, "the old agent to reconnect")
        running = await job(client, before.gated)
        assert (running["phase"], running["attempt"], running["node_id"]) == (
            "running",
            1,
            before.node_id,
        ), running
        # the schedule fires again, and its runs of before are still there
        runs = await _runs(client, before.schedule_id, len(before.schedule_runs) + 2)
        assert all(r in runs for r in before.schedule_runs)
        # the webhook's signing secret still unseals: a new failure is delivered, signed
        failing = await submit(client, {"stack": "shell", "command": ["sh", "-c", "exit 4"]})
        await wait_phase(client, failing, "failed")

        async def delivered() -> list[Any]:
            return [r for r in receiver.received if json.loads(r.body)["run"]["id"] == failing]

        got = await wait_for(delivered, 60, f"the delivery of {failing}")
        assert got[0].verified(before.hook["secret"], time.time())


def _stages(view: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["phase"] for s in view["stages"]}


async def finish_on_todays_agent(
    new: ServeProcess, before: Filled, old_agent: AgentProcess, start_agent: StartAgent, gate: Path
) -> None:
    """The gated job ends on the old agent; today's agent, on its data dir, is the same
    node and runs a job that sees the sealed secret."""
    await trio.to_thread.run_sync(gate.touch)
    async with new.client() as client:
        done = await wait_phase(client, before.gated, "succeeded", "failed")
        assert (done["phase"], done["attempt"]) == ("succeeded", 1), done
        assert await job_logs(client, before.gated, "stdout") == ["before", "after"]
        assert await trio.to_thread.run_sync(old_agent.terminate) == 0
        start_agent(new.url, "node")  # the same --data-dir: the node's credential
        await wait_for(lambda: online_nodes(client), 60, "today's agent")
        again = await submit(client, _job("again"))
        view = await wait_phase(client, again, "succeeded", "failed")
        assert (view["phase"], view["node_id"]) == ("succeeded", before.node_id), view
        lines = await job_logs(client, again, "stdout")
        assert lines == ["line of again", f"secret length {len(VALUE)}"]  # it unsealed


def _old_agent(start_agent: StartAgent, tree: Path) -> Callable[..., AgentProcess]:
    def start(url: str, name: str, *extra: str) -> AgentProcess:
        with pythonpath(tree):
            return start_agent(url, name, *extra)

    return start


async def test_todays_server_serves_a_store_the_earlier_release_filled(
    nursery: trio.Nursery,
    start_agent: StartAgent,
    durable_store_url: str | None,
    tmp_path: Path,
    gate_dir: Path,
) -> None:
    tree = old_tree(tmp_path / "old-release")
    data_dir, port = tmp_path / "data", free_port()
    receiver = await Receiver.start(nursery)
    old = await serve(server_env(data_dir, durable_store_url, tree), port, tmp_path / "old.log")
    agents: list[AgentProcess] = []

    def old_agent(url: str, name: str, *extra: str) -> AgentProcess:
        agents.append(_old_agent(start_agent, tree)(url, name, *extra))
        return agents[-1]

    before = await fill_old(old, old_agent, receiver, gate_dir / "gate")
    assert _schema(data_dir, durable_store_url) == OLD_SCHEMA
    await old.stop()
    new = await serve(server_env(data_dir, durable_store_url, None), port, tmp_path / "new.log")
    newest = load_migrations(dialect="postgres" if durable_store_url else "sqlite")[-1]
    assert _schema(data_dir, durable_store_url) == newest.version
    applied = await trio.to_thread.run_sync(new.log.read_text)
    for version in range(OLD_SCHEMA + 1, newest.version + 1):
        assert f"applied migration {version:04d}_" in applied, applied
    await check_read_back(new, before, receiver)
    await finish_on_todays_agent(new, before, agents[0], start_agent, gate_dir / "gate")
    await new.stop()


def _schema(data_dir: Path, url: str | None) -> int:
    """The highest migration the store has applied."""
    if url:
        import psycopg

        with psycopg.connect(url) as conn:
            row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    else:
        with sqlite3.connect(data_dir / DB_FILENAME) as conn:
            row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    assert row is not None
    return int(row[0])


async def test_a_server_older_than_its_store_refuses_in_one_line(
    durable_store_url: str | None, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    store = open_store(durable_store_url, data_dir)
    await store.open()  # today's migrations
    await store.close()
    known = _schema(data_dir, durable_store_url)
    _run_sql(
        data_dir,
        durable_store_url,
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (9999, 'future', 0)",
    )
    before = _dump(data_dir, durable_store_url)
    line = (
        f"runplane {__version__} (schema {known:04d}) cannot open this store: it is at schema "
        "9999, written by a newer runplane; upgrade runplane or restore a backup taken before "
        "the upgrade\n"
    )
    env = server_env(data_dir, durable_store_url, None)
    done = await _serve_once(env)
    assert done.returncode == 1, done.stderr.decode()
    assert done.stderr.decode() == line  # nothing else: no traceback, no log line
    if durable_store_url:  # an HA replica too (after its start-up log lines)
        replica = {"RUNPLANE_HA": "1", "RUNPLANE_SECRET_KEY": "ab" * 32}
        done = await _serve_once({**env, **replica})
        assert done.returncode == 1, done.stderr.decode()
        assert done.stderr.decode().endswith("}\n" + line), done.stderr.decode()
    assert _dump(data_dir, durable_store_url) == before


async def _serve_once(env: dict[str, str]) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, "-m", "runplane", "serve", "--port", "0"],
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def _run_sql(data_dir: Path, url: str | None, sql: str) -> None:
    if url:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.encode())
    else:
        with sqlite3.connect(data_dir / DB_FILENAME) as conn:
            conn.execute(sql)


def _dump(data_dir: Path, url: str | None) -> list[Any]:
    """The store's migrations and the number of rows of each table."""
    if url:
        import psycopg

        with psycopg.connect(url) as conn:
            tables = [
                r[0]
                for r in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = 'public' ORDER BY 1"
                ).fetchall()
            ]
            counts = [
                (t, conn.execute(f'SELECT count(*) FROM "{t}"'.encode()).fetchone()) for t in tables
            ]
            rows = conn.execute("SELECT * FROM schema_migrations ORDER BY version").fetchall()
        return [counts, rows]
    with sqlite3.connect(data_dir / DB_FILENAME) as conn:
        return list(conn.iterdump())
