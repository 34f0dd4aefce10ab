"""The store going away (issue 41 item 1), on live servers with real agents.

* PostgreSQL (a private cluster of scripts/pgtest, which the test stops and starts: never
  the suite's shared one): while it is stopped, ``POST /v1/jobs`` answers ``503
  store_unavailable`` with ``Retry-After`` (never a 500), ``/readyz`` 503 and ``/healthz``
  200; once it is back, submits are 202, ``/readyz`` 200, the job acknowledged before
  the outage is still there, and a job runs to the end on a real agent.
* SQLite: the server's database file locked by another process (what SQLite meets when
  its file stalls: the write lock is not granted within the busy timeout) gives the same
  503, and the server recovers when the lock goes.

In both, no request of the outage logs an unhandled error. Under ``RUNPLANE_HA=1`` a
follower's ``/readyz`` is the leader's, and 503 while none answers.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from bench.ha_cluster import Cluster
from runplane.persistence import DB_FILENAME
from tests.e2e.conftest import (
    ADMIN,
    LiveServer,
    StartAgent,
    e2e_settings,
    online_nodes,
    start_server,
    submit,
    wait_for,
    wait_phase,
)
from tests.test_scripts import needs_postgres_binaries, pg_dir, pgtest  # noqa: F401 (fixture)

ECHO = {"stack": "shell", "command": ["echo", "after the outage"]}
#: a job that runs through the outage and ends while the store is away
ACROSS = ["sh", "-c", "sleep 3; echo across the outage"]
TERMINAL = ("succeeded", "failed", "timeout", "cancelled")


def _unhandled(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage() == "unhandled error"]


async def assert_store_unavailable(response: httpx.Response) -> None:
    """503 ``store_unavailable`` with Retry-After; a request's detail says to retry (the
    readiness probe's says what the store did instead)."""
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["code"] == "store_unavailable", problem
    if not response.request.url.path.endswith("/readyz"):
        assert "cannot be reached" in problem["detail"] and "retry" in problem["detail"]
    assert int(response.headers["Retry-After"]) > 0


async def _ready(client: httpx.AsyncClient) -> bool:
    return (await client.get("/readyz")).status_code == 200


async def _pg(*args: str | Path) -> str:
    done = await trio.to_thread.run_sync(lambda: pgtest(*args))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


@pytest.fixture
async def pg_server(
    nursery: trio.Nursery,
    pg_dir: Path,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
) -> Any:
    url = await _pg("start", pg_dir)
    live = await start_server(
        nursery, e2e_settings(tmp_path / "server", database_url=url), heartbeat_sec=0.5
    )
    yield live, pg_dir
    live.stop.set()
    await live.done.wait()


@needs_postgres_binaries
async def test_postgres_stopped_answers_503_and_recovers(
    pg_server: tuple[LiveServer, Path],
    start_agent: StartAgent,
    work_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server, pg = pg_server
    start_agent(server.url, "a", "--work-dir", str(work_dir))
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        assert (await client.get("/readyz")).text == "ok"
        before = await submit(client, {"stack": "shell", "command": ["echo", "before"]})
        await wait_phase(client, before, "succeeded")
        across = await submit(client, {"stack": "shell", "command": ACROSS})
        await wait_phase(client, across, "running")

        await _pg("stop", pg)
        await assert_store_unavailable(await client.post("/v1/jobs", json=ECHO))
        await assert_store_unavailable(await client.get(f"/v1/jobs/{before}"))
        not_ready = await client.get("/readyz")
        await assert_store_unavailable(not_ready)
        assert (await client.get("/v1/readyz")).status_code == 503
        health = await client.get("/healthz")
        assert (health.status_code, health.text) == (200, "ok")

        await _pg("start", pg)
        await wait_for(lambda: _ready(client), 60, "/readyz to answer ok again")
        assert (await client.get("/v1/readyz")).text == "ok"
        view = await wait_phase(client, before, "succeeded")  # acknowledged: still there
        assert view["phase"] == "succeeded"
        # the job that ended on its node during the outage: its actor resumes, its end is
        # recorded once the store is back (the log lines its agent sent while the store was
        # away are not resent: not checked here)
        ended = await wait_phase(client, across, *TERMINAL, within=90)
        assert ended["phase"] == "succeeded", ended
        job_id = await submit(client, ECHO)
        done = await wait_phase(client, job_id, "succeeded", "failed", within=60)
        assert done["phase"] == "succeeded", done
        logs = (await client.get(f"/v1/jobs/{job_id}/logs?stream=stdout")).json()
        assert {"stream": "stdout", "line": "after the outage"} in logs["logs"]
    assert not _unhandled(caplog)


LOCKER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


async def test_sqlite_file_locked_by_another_process_answers_503_and_recovers(
    server: LiveServer, start_agent: StartAgent, work_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = server.app.extensions["runplane"].settings.data_dir / DB_FILENAME
    start_agent(server.url, "a", "--work-dir", str(work_dir))
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        assert (await client.get("/readyz")).text == "ok"
        locker = await trio.to_thread.run_sync(
            lambda: subprocess.Popen(
                [sys.executable, "-c", LOCKER, str(db)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
        )
        try:
            assert locker.stdout is not None
            line = await trio.to_thread.run_sync(locker.stdout.readline)
            assert line.strip() == "locked"
            # the write waits out SQLite's busy timeout (10 s), then gives up
            await assert_store_unavailable(await client.post("/v1/jobs", json=ECHO))
            await assert_store_unavailable(await client.get("/readyz"))
            assert (await client.get("/healthz")).status_code == 200
        finally:
            assert locker.stdin is not None
            locker.stdin.close()
            await trio.to_thread.run_sync(locker.wait)
        await wait_for(lambda: _ready(client), 30, "/readyz to answer ok again")
        job_id = await submit(client, ECHO)
        done = await wait_phase(client, job_id, "succeeded", "failed", within=60)
        assert done["phase"] == "succeeded", done
    assert not _unhandled(caplog)


@pytest.mark.postgres
async def test_replicas_are_ready_only_while_a_leader_answers(
    pg_database: str, tmp_path: Path
) -> None:
    """``RUNPLANE_HA=1``: the leader's ``/readyz`` is its own, a follower's is the
    leader's (relayed); with the leader killed a follower is not ready (``503``) until it
    leads itself."""
    cluster = Cluster(pg_database, tmp_path, replicas=2, env={"RUNPLANE_ADMIN_TOKEN": ADMIN})
    try:
        leader = await trio.to_thread.run_sync(cluster.start_all)
        (follower,) = [r for r in cluster.replicas if r is not leader]
        async with httpx.AsyncClient(timeout=10) as client:

            async def ready(url: str) -> bool:
                answer = await client.get(f"{url}/readyz")
                return (answer.status_code, answer.text) == (200, "ok")

            # (the leader may still be rebuilding its actor tree: 503 until it is done)
            await wait_for(lambda: ready(leader.url), 60, "the leader to be ready")
            # relayed to the leader once the follower has read who leads (its lease poll)
            await wait_for(lambda: ready(follower.url), 30, "the follower to relay")
            cluster.kill(leader)
            refused = await client.get(f"{follower.url}/v1/readyz")
            assert refused.status_code == 503, refused.text
            assert refused.json()["code"] == "no_leader" and "Retry-After" in refused.headers
            await wait_for(lambda: ready(follower.url), 60, "the follower to take over")
        assert cluster.leader() is follower
    finally:
        await trio.to_thread.run_sync(cluster.stop_all)


async def test_not_ready_once_the_actor_tree_stopped(server: LiveServer) -> None:
    """The store answers but the actor tree is gone (stopping): 503 ``not_ready``."""
    async with server.client() as client:
        assert (await client.get("/readyz")).text == "ok"
        await server.root.stop()
        refused = await client.get("/readyz")
        assert refused.status_code == 503 and refused.json()["code"] == "not_ready"
        assert int(refused.headers["Retry-After"]) > 0
        assert (await client.get("/healthz")).text == "ok"
