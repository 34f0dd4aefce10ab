"""Full disks (issue 41 item 3), on real small filesystems (a tmpfs mounted for the test;
skipped, saying why, where mounting is not permitted), a live server and real agents.

* The data dir full: ``POST /v1/jobs`` answers ``507 insufficient_storage`` naming
  RUNPLANE_DATA_DIR (never a 500), reads keep answering 200 and ``/readyz`` stays ok; once
  space is freed, a submit is 202 and the job runs on a real agent, no restart.
* The artifact store full: an upload answers 507 naming the artifact store and leaves no
  file, half-written or temp; an agent whose job's output meets it fails the job with the
  server's reason in its error and a system line; a later upload succeeds.
* A node's work root full: the job fails at once with a reason naming the node and its
  work root; the node stays online and runs the next job once space is back.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from runplane.artifacts.fs import TEMP_SUFFIX
from tests.e2e.conftest import (
    LiveServer,
    StartAgent,
    e2e_settings,
    job_logs,
    online_nodes,
    start_server,
    submit,
    wait_for,
    wait_phase,
)
from tests.persistence.test_store_full import fill, mount_tmpfs, unmount

ECHO = {"stack": "shell", "command": ["echo", "after the full disk"]}
#: a few KB per job, so the store's WAL outgrows what it already holds in a few submits
PAD = "p" * 8192
TERMINAL = ("succeeded", "failed", "timeout", "cancelled")


def _unhandled(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage() == "unhandled error"]


def assert_insufficient_storage(response: httpx.Response, *names: str) -> dict[str, Any]:
    assert response.status_code == 507, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem: dict[str, Any] = response.json()
    assert problem["code"] == "insufficient_storage", problem
    assert "full" in problem["detail"] and "free space" in problem["detail"], problem
    for name in names:
        assert name in problem["detail"], problem
    return problem


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """The server's data dir (the ``server`` fixture's) on its own 16 MiB tmpfs."""
    mnt = tmp_path / "server"
    mount_tmpfs(mnt, "16m")
    try:
        yield mnt
    finally:
        unmount(mnt)


async def test_a_full_data_dir_refuses_writes_with_507_and_recovers(
    server: LiveServer,
    data_dir: Path,
    start_agent: StartAgent,
    work_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    start_agent(server.url, "a", "--work-dir", str(work_dir))
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        before = await submit(client, {"stack": "shell", "command": ["echo", "before"]})
        await wait_phase(client, before, "succeeded")

        filler = fill(data_dir)
        try:
            refused = None
            for _ in range(200):  # the WAL's room already allocated takes a few first
                body = {**ECHO, "env": {"PAD": PAD}}
                response = await client.post("/v1/jobs", json=body)
                if response.status_code != 202:
                    refused = response
                    break
            assert refused is not None, "the full disk never refused a submit"
            assert_insufficient_storage(refused, f"RUNPLANE_DATA_DIR={data_dir}")
            # reads keep being served; the probe does not take the server out
            assert (await client.get(f"/v1/jobs/{before}")).status_code == 200
            assert (await client.get("/v1/jobs")).status_code == 200
            assert (await client.get("/v1/nodes")).status_code == 200
            assert (await client.get("/readyz")).text == "ok"
            again = await client.post("/v1/jobs", json={**ECHO, "env": {"PAD": PAD}})
            assert_insufficient_storage(again, f"RUNPLANE_DATA_DIR={data_dir}")
        finally:
            filler.unlink()

        job_id = await submit(client, ECHO)
        done = await wait_phase(client, job_id, *TERMINAL, within=60)
        assert done["phase"] == "succeeded", done
        assert "after the full disk" in await job_logs(client, job_id, "stdout")
    assert not _unhandled(caplog)


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.fixture
async def artifact_server(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[LiveServer]:
    """A server whose artifact store (``<data dir>/artifacts``) is its own 4 MiB tmpfs."""
    data = tmp_path / "server"
    store = data / "artifacts"
    mount_tmpfs(store, "4m")
    try:
        live = await start_server(nursery, e2e_settings(data), heartbeat_sec=0.5)
        yield live
        live.stop.set()
        await live.done.wait()
    finally:
        unmount(store)


async def test_a_full_artifact_store_refuses_uploads_with_507_and_leaves_nothing(
    artifact_server: LiveServer,
    start_agent: StartAgent,
    work_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = artifact_server
    store = server.app.extensions["runplane"].settings.data_dir / "artifacts"
    start_agent(server.url, "a", "--work-dir", str(work_dir))
    job_body = {
        "stack": "shell",
        "command": ["sh", "-c", "head -c 300000 /dev/zero > result.bin"],
        "outputs": [{"artifact": "result", "glob": "result.bin"}],
    }
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        assert (
            await client.put("/v1/artifacts/k/before.bin", content=b"b" * 1000)
        ).status_code == 201
        before = _files(store)

        filler = fill(store)
        try:
            put = await client.put("/v1/artifacts/k/during.bin", content=b"d" * 200_000)
            assert_insufficient_storage(put, "artifact store", str(store))
            assert _files(store) == sorted([*before, "filler"])  # no object, no temp file
            assert not [p for p in store.rglob(f"*{TEMP_SUFFIX}")]
            assert (await client.get("/v1/artifacts/k/during.bin")).status_code == 404
            assert (await client.get("/v1/artifacts/k/before.bin")).content == b"b" * 1000

            # an agent's upload of a job's output: the job fails with the server's reason
            job_id = await submit(client, job_body)
            view = await wait_phase(client, job_id, *TERMINAL, within=60)
            assert view["phase"] == "failed", view
            assert "uploading output result.bin failed" in view["error"], view["error"]
            assert "507" in view["error"] and "artifact store" in view["error"], view["error"]
            assert view["artifacts"] == []
            system = await job_logs(client, job_id, "system")
            assert any("artifact store" in line and "full" in line for line in system), system
            assert _files(store) == sorted([*before, "filler"])
        finally:
            filler.unlink()

        put = await client.put("/v1/artifacts/k/after.bin", content=b"a" * 200_000)
        assert put.status_code == 201, put.text
        job_id = await submit(client, job_body)
        view = await wait_phase(client, job_id, *TERMINAL, within=60)
        assert view["phase"] == "succeeded", view
        assert [a["size"] for a in view["artifacts"]] == [300_000]
    assert not _unhandled(caplog)


@pytest.fixture
def small_work_root() -> Iterator[Path]:
    """An agent's ``--work-dir`` on its own 4 MiB tmpfs, reachable by a job user."""
    top = Path(tempfile.mkdtemp(prefix="runplane-e2e-full-"))
    try:
        mount_tmpfs(top, "4m")
        top.chmod(0o711)
        yield top
    finally:
        unmount(top)
        shutil.rmtree(top, ignore_errors=True)


async def test_a_full_work_root_fails_the_job_naming_the_node_and_recovers(
    server: LiveServer,
    start_agent: StartAgent,
    small_work_root: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    work = small_work_root / "jobs"
    start_agent(server.url, "full-node", "--work-dir", str(work))
    writes = {
        "stack": "shell",
        "command": ["sh", "-c", "echo data > out.txt && cat out.txt"],
    }
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        filler = fill(small_work_root)
        try:
            job_id = await submit(client, writes)
            view = await wait_phase(client, job_id, *TERMINAL, within=60)
            assert view["phase"] == "failed", view
            assert "full-node" in view["error"] and "work root" in view["error"], view["error"]
            assert "full" in view["error"], view["error"]
            nodes = await online_nodes(client)
            assert [n["name"] for n in nodes] == ["full-node"]
            # a job that needs no room still runs on the full node
            quiet = await submit(client, {"stack": "shell", "command": ["echo", "no room needed"]})
            done = await wait_phase(client, quiet, *TERMINAL, within=60)
            assert done["phase"] == "succeeded", done
            assert await job_logs(client, quiet, "stdout") == ["no room needed"]
        finally:
            filler.unlink()
        job_id = await submit(client, writes)
        view = await wait_phase(client, job_id, *TERMINAL, within=60)
        assert view["phase"] == "succeeded", view
        assert await job_logs(client, job_id, "stdout") == ["data"]
    assert not _unhandled(caplog)
