"""``runplane agent`` as a real process against the in-test server harness."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio

from runplane.agent.main import reap, zombie_children
from runplane.agent.protocol import JobFinished
from tests.agent.test_client import REVOKED, FakeServer, run_msg

WAIT_SEC = 30.0


class Cli:
    """One ``python -m runplane agent`` process; stderr goes to a file."""

    def __init__(self, tmp_path: Path) -> None:
        self.log = tmp_path / "agent.stderr"
        self.data_dir = tmp_path / "agent-data"
        self.proc: trio.Process | None = None

    async def start(self, *args: str, env: dict[str, str] | None = None) -> trio.Process:
        base = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
        base.update(env or {})
        with self.log.open("wb") as stderr:
            self.proc = await trio.lowlevel.open_process(
                [sys.executable, "-m", "runplane", "agent", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=base,
            )
        return self.proc

    async def wait(self) -> int:
        assert self.proc is not None
        with trio.fail_after(WAIT_SEC):
            return await self.proc.wait()

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines()

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines() if line.startswith("{")]


def ppid_of(pid: int) -> int | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return None
    return int(data[data.rfind(b")") + 2 :].split()[1])


def proc_exists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


async def test_cli_agent_enrolls_and_stops_cleanly_on_sigterm(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery)
    cli = Cli(tmp_path)
    try:
        # A server setting that `runplane serve` would refuse: the agent does not read them.
        await cli.start(
            "--server",
            server.url,
            "--join-token",
            "rpj_cli",
            "--data-dir",
            str(cli.data_dir),
            "--name",
            "cli-node",
            "--max-concurrency",
            "3",
            "--capability",
            "simulator",
            "--capability",
            "process",
            env={"RUNPLANE_AUTH": "not-a-mode"},
        )
        await server.until(lambda: len(server.hellos()) == 1, within=WAIT_SEC)
        hello = server.hellos()[0]
        assert hello.join_token == "rpj_cli"
        assert (hello.facts.name, hello.facts.max_concurrency) == ("cli-node", 3)
        assert hello.facts.cpu_cores == len(os.sched_getaffinity(0))
        assert hello.facts.capabilities[0] == "process"
        assert hello.facts.capabilities[-1] == "simulator"
        assert hello.facts.capabilities.count("process") == 1
        await server.send(run_msg(["echo", "from the cli agent"]))
        fin = await server.wait(JobFinished, within=WAIT_SEC)
        assert fin.outcome == "succeeded"
        assert cli.proc is not None
        cli.proc.send_signal(signal.SIGTERM)
        assert await cli.wait() == 0
    finally:
        cli.kill()
    assert (cli.data_dir / "credential").read_text().strip() == "rpn_test_credential"
    assert server.closes == [(1000, "agent stopping")]
    msgs = [r["msg"] for r in cli.records()]
    assert "connected" in msgs and "stop requested" in msgs and msgs[-1] == "agent stopped"
    assert all(r["logger"] == "runplane.agent" for r in cli.records())


async def test_cli_agent_refused_prints_one_line_and_exits_1(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await FakeServer.start(nursery, refuse=(4401, REVOKED))
    cli = Cli(tmp_path)
    try:
        await cli.start(
            "--server", server.url, "--join-token", "rpj_old", "--data-dir", str(cli.data_dir)
        )
        assert await cli.wait() == 1
    finally:
        cli.kill()
    assert cli.lines()[-1] == f"runplane agent: {REVOKED}"


async def test_cli_agent_rejects_a_bad_server_url(tmp_path: Path) -> None:
    cli = Cli(tmp_path)
    await cli.start("--server", "127.0.0.1:8080", "--data-dir", str(cli.data_dir))
    assert await cli.wait() == 2
    assert cli.lines()[-1].startswith("runplane agent: server URL must look like http://")
    await cli.start("--data-dir", str(cli.data_dir))
    assert await cli.wait() == 2
    assert "--server" in cli.lines()[-1]


async def test_cli_agent_adopts_and_reaps_orphans(nursery: trio.Nursery, tmp_path: Path) -> None:
    server = await FakeServer.start(nursery)
    cli = Cli(tmp_path)
    try:
        proc = await cli.start("--server", server.url, "--data-dir", str(cli.data_dir))
        await server.until(lambda: len(server.hellos()) == 1, within=WAIT_SEC)
        # A process that leaves the job's process group and outlives the job's shell.
        await server.send(run_msg(["sh", "-c", "setsid sleep 1 >/dev/null 2>&1 & echo $!"]))
        await server.wait(JobFinished, within=WAIT_SEC)
        orphan = int(server.stdout()[0])
        assert ppid_of(orphan) == proc.pid  # adopted by the agent (child subreaper) ...
        with trio.fail_after(WAIT_SEC):  # ... and reaped after it exits, not left a zombie
            while True:
                if not proc_exists(orphan):
                    break
                await trio.sleep(0.05)
        assert zombie_children(proc.pid) == set()
        proc.send_signal(signal.SIGTERM)
        assert await cli.wait() == 0
    finally:
        cli.kill()
    assert "reaped orphaned processes" in [r["msg"] for r in cli.records()]


def test_zombie_children_and_reap() -> None:
    child = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while child.pid not in zombie_children() and time.monotonic() < deadline:
        time.sleep(0.01)
    assert child.pid in zombie_children()
    assert reap([child.pid]) == 1
    assert child.pid not in zombie_children()
    assert reap([child.pid]) == 0  # already gone: no error
    child.returncode = 0  # reaped by us, not by Popen
