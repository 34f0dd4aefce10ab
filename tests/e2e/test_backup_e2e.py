"""``runplane backup`` and ``runplane restore`` (docs/operations.md "Backups"), for real: a
live server with a real agent, filled with jobs with logs and artifacts and a sealed org
secret, backed up while it runs (and while jobs are submitted in a loop), restored into a
fresh data dir (and, on PostgreSQL, a fresh database), then served again: the jobs read
back, every artifact downloads with the same sha256 and the secret still unseals (a job
sees it). The refusals: a target that is not empty, a corrupt file, no manifest, a newer
schema, a server running on the target."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.datadir import lock_data_dir
from tests.e2e.conftest import (
    ADMIN,
    LiveServer,
    StartAgent,
    e2e_settings,
    job,
    job_logs,
    online_nodes,
    start_server,
    submit,
    wait_for,
    wait_phase,
)
from tests.test_scripts import needs_postgres_binaries, pg_dir, pgtest  # noqa: F401 (fixture)

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
VALUE = "backed-up-secret-0123456789"
#: a job that writes two artifacts (one random) and says it had the secret
SCRIPT = (
    "set -e; mkdir -p out; head -c 300000 /dev/urandom > out/blob.bin; "
    'echo "hello $1" > out/hello.txt; echo "line of $1"; echo "secret length ${#T}"'
)


async def runplane(env: dict[str, str], *args: str) -> trio.CompletedProcess[bytes]:
    """``python -m runplane ARGS`` with the server settings ``env`` (nothing else)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    with trio.fail_after(180):
        return await trio.run_process(
            [sys.executable, "-m", "runplane", *args],
            env={**base, **env},
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


def settings_env(data_dir: Path, url: str | None) -> dict[str, str]:
    env = {"RUNPLANE_DATA_DIR": str(data_dir)}
    if url:
        env["RUNPLANE_DATABASE_URL"] = url
    return env


async def fill(server: LiveServer, start_agent: StartAgent, name: str) -> dict[str, Any]:
    """Jobs with logs and artifacts, and the org secret TOKEN; what they hold."""
    start_agent(server.url, name)
    expect: dict[str, Any] = {}
    async with server.client() as client:
        put = await client.put(
            "/v1/secrets/TOKEN?org=org_default", json={"value": VALUE}, headers=ADMIN_H
        )
        assert put.status_code == 201, put.text
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        for n in range(3):
            job_id = await submit(client, _job(str(n)))
            view = await wait_phase(client, job_id, "succeeded", "failed")
            assert view["phase"] == "succeeded", view
            blobs = {}
            for artifact in view["artifacts"]:
                got = await client.get(artifact["ref"])
                assert got.status_code == 200
                assert hashlib.sha256(got.content).hexdigest() == artifact["sha256"]
                blobs[artifact["ref"]] = artifact["sha256"]
            assert len(blobs) == 2, view["artifacts"]
            lines = await job_logs(client, job_id, "stdout")
            assert lines == [f"line of {n}", f"secret length {len(VALUE)}"]
            expect[job_id] = {"artifacts": blobs, "stdout": lines}
    return expect


def _job(word: str) -> dict[str, Any]:
    return {
        "stack": "shell",
        "command": ["sh", "-c", SCRIPT, "sh", word],
        "env": {"T": "${secrets.TOKEN}"},
        "outputs": [{"artifact": "out", "glob": "out/*"}],
    }


async def backup_while_submitting(
    server: LiveServer, env: dict[str, str], dest: Path
) -> tuple[trio.CompletedProcess[bytes], list[str]]:
    """``runplane backup DEST`` while jobs are submitted in a loop; the ids submitted
    before the backup began (the backup must hold them)."""
    before: list[str] = []
    started = trio.Event()
    async with server.client() as client, trio.open_nursery() as nursery:

        async def loop() -> None:
            while True:
                job_id = await submit(client, {"stack": "shell", "command": ["true"]})
                if not started.is_set():
                    before.append(job_id)
                await trio.sleep(0.01)

        nursery.start_soon(loop)
        await wait_for(lambda: _true(len(before) >= 3), 30, "submits")
        started.set()
        done = await runplane(env, "backup", str(dest))
        nursery.cancel_scope.cancel()
    return done, before


async def _true(value: bool) -> bool:
    return value


async def check_restored(
    server: LiveServer, start_agent: StartAgent, expect: dict[str, Any], before: list[str]
) -> None:
    """The restored server holds every job, log and artifact, and unseals the secret."""
    async with server.client() as client:
        for job_id, held in expect.items():
            view = await job(client, job_id)
            assert view["phase"] == "succeeded", view
            assert await job_logs(client, job_id, "stdout") == held["stdout"]
            for ref, sha in held["artifacts"].items():
                got = await client.get(ref)
                assert got.status_code == 200, (ref, got.text)
                assert hashlib.sha256(got.content).hexdigest() == sha
        for job_id in before:
            assert (await client.get(f"/v1/jobs/{job_id}")).status_code == 200, job_id
        start_agent(server.url, "restored")
        await wait_for(lambda: online_nodes(client), 30, "the agent of the restored server")
        job_id = await submit(client, _job("again"))
        view = await wait_phase(client, job_id, "succeeded", "failed")
        assert view["phase"] == "succeeded", view  # a secret that did not unseal fails it
        lines = await job_logs(client, job_id, "stdout")
        assert lines == ["line of again", f"secret length {len(VALUE)}"]


async def round_trip(
    nursery: trio.Nursery,
    start_agent: StartAgent,
    tmp_path: Path,
    url: str | None = None,
    target_url: str | None = None,
) -> Path:
    """Fill, back up while serving, restore into a fresh data dir, serve and check; the
    backup's directory."""
    old_dir, new_dir, dest = tmp_path / "old", tmp_path / "new", tmp_path / "backup"
    db = {"database_url": url} if url else {}
    server = await start_server(nursery, e2e_settings(old_dir, **db), heartbeat_sec=0.5)
    expect = await fill(server, start_agent, "first")
    done, before = await backup_while_submitting(server, settings_env(old_dir, url), dest)
    assert done.returncode == 0, done.stderr.decode()
    assert b"backup complete" in done.stderr
    server.stop.set()
    await server.done.wait()
    manifest = json.loads((dest / "manifest.json").read_text())
    assert manifest["store"] == ("postgresql" if url else "sqlite")
    assert "secret.key" in manifest["files"]
    assert oct(dest.stat().st_mode & 0o777) == "0o700"
    assert all(oct((dest / f).stat().st_mode & 0o777) == "0o600" for f in manifest["files"])
    restored = await runplane(settings_env(new_dir, target_url), "restore", str(dest))
    assert restored.returncode == 0, restored.stderr.decode()
    db = {"database_url": target_url} if target_url else {}
    again = await start_server(nursery, e2e_settings(new_dir, **db), heartbeat_sec=0.5)
    await check_restored(again, start_agent, expect, before)
    again.stop.set()
    await again.done.wait()
    return dest


async def test_sqlite_backup_while_serving_restores_jobs_artifacts_and_secrets(
    nursery: trio.Nursery, start_agent: StartAgent, tmp_path: Path
) -> None:
    dest = await round_trip(nursery, start_agent, tmp_path)
    new_env = settings_env(tmp_path / "new", None)
    # the target now holds a store: refused without --force, restored over with it
    again = await runplane(new_env, "restore", str(dest))
    assert again.returncode == 1
    assert b"not empty: pass --force" in again.stderr
    forced = await runplane(new_env, "restore", "--force", str(dest))
    assert forced.returncode == 0, forced.stderr.decode()


async def test_refusals_name_what_is_wrong(nursery: trio.Nursery, tmp_path: Path) -> None:
    old_dir = tmp_path / "old"
    server = await start_server(nursery, e2e_settings(old_dir), heartbeat_sec=0.5)
    env = settings_env(old_dir, None)
    good = tmp_path / "good"
    assert (await runplane(env, "backup", str(good))).returncode == 0
    nonempty = await runplane(env, "backup", str(good))  # a backup never overwrites one
    assert nonempty.returncode == 1 and b"not an empty directory" in nonempty.stderr
    held = lock_data_dir(old_dir)  # what `runplane serve` holds (the test's server does not)
    busy = await runplane(env, "restore", "--force", str(good))
    os.close(held)
    assert busy.returncode == 1 and b"in use by another server" in busy.stderr
    server.stop.set()
    await server.done.wait()
    fresh = settings_env(tmp_path / "fresh", None)

    async def refused(src: Path, says: bytes) -> None:
        done = await runplane(fresh, "restore", str(src))
        assert done.returncode == 1, done.stderr
        assert says in done.stderr, done.stderr
        assert not (tmp_path / "fresh" / "runplane.db").exists()

    await refused(tmp_path / "nothing", b"has no manifest.json")
    corrupt = _copy(good, tmp_path / "corrupt")
    with (corrupt / "runplane.db").open("r+b") as fh:
        fh.seek(200)
        fh.write(b"\xff")
    await refused(corrupt, b"does not match its sha256")
    unfinished = _copy(good, tmp_path / "unfinished")
    (unfinished / "manifest.json").unlink()
    await refused(unfinished, b"incomplete")
    newer = _copy(good, tmp_path / "newer")
    manifest = json.loads((newer / "manifest.json").read_text())
    manifest["schema_version"] += 1
    (newer / "manifest.json").write_text(json.dumps(manifest))
    await refused(newer, f"version {manifest['schema_version']}, newer".encode())
    assert (await runplane(fresh, "restore", str(good))).returncode == 0


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _create_database(admin: str, name: str) -> str:
    import psycopg

    from tests.conftest import with_dbname

    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    return with_dbname(admin, name)


@needs_postgres_binaries
@pytest.mark.postgres
async def test_postgres_backup_while_serving_restores_into_another_database(
    nursery: trio.Nursery,
    start_agent: StartAgent,
    tmp_path: Path,
    pg_dir: Path,  # noqa: F811 (the fixture imported above)
) -> None:
    started = await trio.to_thread.run_sync(lambda: pgtest("start", pg_dir))
    assert started.returncode == 0, started.stderr
    admin = started.stdout.strip().splitlines()[-1]
    source = await trio.to_thread.run_sync(_create_database, admin, "rp_source")
    target = await trio.to_thread.run_sync(_create_database, admin, "rp_target")
    dest = await round_trip(nursery, start_agent, tmp_path, source, target)
    again = await runplane(settings_env(tmp_path / "other", target), "restore", str(dest))
    assert again.returncode == 1 and b"not empty: pass --force" in again.stderr


async def test_backup_without_pg_dump_or_store_fails_in_one_line(tmp_path: Path) -> None:
    url = "postgresql://runplane@127.0.0.1:1/runplane"
    base = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    with trio.fail_after(120):
        done = await trio.run_process(
            [sys.executable, "-m", "runplane", "backup", str(tmp_path / "b")],
            env={**base, "PATH": str(tmp_path), **settings_env(tmp_path / "d", url)},
            capture_stderr=True,
            check=False,
        )
    assert done.returncode == 1
    assert (
        done.stderr
        == b"runplane backup: pg_dump is not on PATH: install the PostgreSQL client tools\n"
    )
    nothing = await runplane(settings_env(tmp_path / "d", None), "backup", str(tmp_path / "c"))
    assert nothing.returncode == 1 and b"no database at" in nothing.stderr
    assert not (tmp_path / "c" / "manifest.json").exists()
    assert not (tmp_path / "b").exists()
