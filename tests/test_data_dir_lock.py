"""One data dir, one server (docs/operations.md "One data dir, one server"): a second
``runplane serve`` on a data dir in use exits 1 at once with one line naming the holder's
pid and changes nothing (no store, no agent, no "started"); the first keeps its node
online and runs jobs. The lock is the kernel's: a holder killed with SIGKILL leaves none."""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from runplane.datadir import DataDirInUse, lock_data_dir
from tests.e2e.conftest import wait_for

RUNPLANE = [sys.executable, "-m", "runplane"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ, RUNPLANE_DATA_DIR=str(data_dir), RUNPLANE_LOCAL_AGENT="1")
    env.pop("RUNPLANE_TOKEN", None)
    return subprocess.Popen(
        [*RUNPLANE, "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )


def test_a_lock_held_by_a_killed_process_is_free_again(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from pathlib import Path; from runplane.datadir import "
            "lock_data_dir; lock_data_dir(Path(sys.argv[1])); print('held', flush=True); "
            "time.sleep(60)",
            str(tmp_path),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
        with pytest.raises(DataDirInUse) as busy:
            lock_data_dir(tmp_path)
        assert busy.value.pid == holder.pid
        assert f"in use by another server (pid {holder.pid})" in str(busy.value)
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    fd = lock_data_dir(tmp_path)  # the kernel dropped the dead holder's lock
    os.close(fd)


async def test_a_second_server_on_a_data_dir_in_use_exits_and_changes_nothing(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "data"
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    first = _serve(data_dir, port, tmp_path / "first.log")
    try:
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:

            async def online() -> list[str]:
                try:
                    nodes = (await client.get("/v1/nodes")).json()
                except httpx.TransportError:
                    return []
                return [n["name"] for n in nodes if n["status"] == "online"]

            assert await wait_for(online, 60, "the first server's local agent") == ["local"]
            before = sorted(p.name for p in data_dir.iterdir())
            with trio.fail_after(30):
                second = await trio.run_process(
                    [*RUNPLANE, "serve", "--port", str(_free_port())],
                    env=dict(os.environ, RUNPLANE_DATA_DIR=str(data_dir), RUNPLANE_LOCAL_AGENT="1"),
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                )
            assert second.returncode == 1
            lines = second.stderr.decode().splitlines()
            assert lines == [
                f"runplane: data dir {data_dir} is in use by another server (pid {first.pid}); "
                "stop it, or give this one its own with RUNPLANE_DATA_DIR"
            ]
            assert sorted(p.name for p in data_dir.iterdir()) == before
            assert await online() == ["local"]  # the first server's node stays online
            job = (
                await client.post("/v1/runs", json={"stack": "shell", "command": ["echo", "ok"]})
            ).json()

            async def ended() -> str | None:
                phase = (await client.get(f"/v1/jobs/{job['job_id']}")).json()["phase"]
                return phase if phase in ("succeeded", "failed", "cancelled") else None

            assert await wait_for(ended, 60, "the job on the first server") == "succeeded"
            assert await online() == ["local"]
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(30)


async def test_a_busy_local_agent_data_dir_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """Another agent holds ``<data dir>/local-agent``: the server stops with one line."""
    agent_dir = tmp_path / "data" / "local-agent"
    agent_dir.mkdir(parents=True)
    fd = os.open(agent_dir / "agent.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a running agent holds it
    try:
        with trio.fail_after(60):
            served = await trio.run_process(
                [*RUNPLANE, "serve", "--port", str(_free_port())],
                env=dict(
                    os.environ, RUNPLANE_DATA_DIR=str(tmp_path / "data"), RUNPLANE_LOCAL_AGENT="1"
                ),
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    finally:
        os.close(fd)
    err = served.stderr.decode()
    assert served.returncode == 1, err
    assert "Traceback" not in err and "ExceptionGroup" not in err
    assert err.splitlines()[-1] == (
        f"runplane: local agent: another agent is running with data dir {agent_dir}"
    )
