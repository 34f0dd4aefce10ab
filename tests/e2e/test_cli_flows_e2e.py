"""Following runs from the CLI and the job tables (docs/cli.md), as subprocesses of
``python -m runplane`` against a live server with a real agent:

* ``pipeline run -f`` prints the ``plr_`` id first, each stage's changes with its wait
  reason, every stage's final phase and exit code; Ctrl-C says the run goes on and how to
  cancel it (exit 130); ``pipeline ls``, ``get`` and ``cancel``.
* ``submit -f`` and ``session create -f`` say why a job that cannot be placed waits;
  ``session get`` shows its services and the pod job's wait reason.
* ``ls`` shows names, node names, durations and relative times, filters by project,
  pipeline and node; ``ls --array`` prints the sweep table; ``ls --help`` explains
  ``attempt`` and ``attempts``."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import trio

from tests.e2e.conftest import LiveServer, StartAgent, online_nodes, wait_for
from tests.e2e.test_cli_e2e import RUNPLANE, cli, env_for

UNPLACEABLE = "no node meets: 64 CPU cores"


async def _agent(server: LiveServer, start_agent: StartAgent, name: str) -> None:
    start_agent(server.url, name)
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")


class Running:
    """A CLI subprocess whose stdout and stderr are read as they come."""

    def __init__(self, url: str, *args: str) -> None:
        # SIGINT as a terminal's Ctrl-C delivers it: a suite started in the background
        # (`scripts/test &`) ignores SIGINT, which its children would inherit
        self.proc = subprocess.Popen(
            [*RUNPLANE, *args],
            env=env_for(url),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        self.out = b""
        self.err = b""

    async def wait_err(self, text: str, within: float = 60) -> None:
        """Read stderr until it holds ``text``."""
        assert self.proc.stderr is not None
        with trio.fail_after(within):
            while text.encode() not in self.err:
                chunk = await trio.to_thread.run_sync(
                    self.proc.stderr.read1, 4096, abandon_on_cancel=True
                )
                assert chunk, f"ended without {text!r}: {self.err.decode()}"
                self.err += chunk

    async def first_line(self) -> str:
        assert self.proc.stdout is not None
        with trio.fail_after(60):
            line = await trio.to_thread.run_sync(self.proc.stdout.readline, abandon_on_cancel=True)
            return line.decode().strip()

    async def interrupt(self) -> int:
        """SIGINT, then the exit status; the rest of its output is read."""
        self.proc.send_signal(signal.SIGINT)
        with trio.fail_after(30):
            out, rest = await trio.to_thread.run_sync(self.proc.communicate, abandon_on_cancel=True)
        self.out += out
        self.err += rest
        return self.proc.returncode


async def test_pipeline_run_follow_shows_every_stage_to_its_end(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    await _agent(server, start_agent, "flownode")
    abc = tmp_path / "abc.yaml"
    abc.write_text(
        "name: abc\n"
        "stages:\n"
        "  - {name: a, stack: shell, command: [echo, a]}\n"
        "  - {name: b, stack: shell, needs: [a], command: [sh, -c, 'exit 2']}\n"
        "  - {name: c, stack: shell, needs: [b], command: [echo, c]}\n"
    )
    ran = await cli(server.url, "pipeline", "run", "-f", str(abc))
    assert ran.returncode == 1, ran.stderr
    out = ran.stdout.decode().splitlines()
    run_id = out[0]
    assert run_id.startswith("plr_") and out[-1] == f"{run_id} failed"
    err = ran.stderr.decode()
    assert "a succeeded (exit 0)" in err
    assert "b failed (exit 2)" in err
    assert "c skipped: it needs 'b', which failed" in err
    summary = err[err.index(f"{run_id} failed:") :]
    assert all(f"  {s} " in summary for s in ("a", "b", "c"))

    listed = (await cli(server.url, "pipeline", "ls")).stdout.decode()
    assert run_id in listed and "abc" in listed and "1 failed" in listed
    got = await cli(server.url, "pipeline", "get", run_id)
    rows = {line.split()[0]: line.split() for line in got.stdout.decode().splitlines()[2:]}
    assert rows["b"][1:2] == ["failed"] and "2" in rows["b"]
    assert rows["c"][1] == "skipped"
    as_json = json.loads((await cli(server.url, "pipeline", "get", run_id, "-o", "json")).stdout)
    assert as_json["status"] == "failed"
    stages = (await cli(server.url, "ls", "--pipeline", run_id)).stdout.decode().splitlines()
    assert sorted(line.split()[1] for line in stages[1:]) == ["a", "b"]  # c never had a job


async def test_pipeline_follow_says_why_a_stage_waits_and_ctrl_c_leaves_it_running(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    await _agent(server, start_agent, "waitnode")
    big = tmp_path / "big.yaml"
    big.write_text(
        "name: big\n"
        "stages:\n"
        "  - {name: train, stack: shell, command: [echo, hi], limits: {cpu_cores: 64}}\n"
        "  - {name: report, stack: shell, needs: [train], command: [echo, done]}\n"
    )
    following = Running(server.url, "pipeline", "run", "-f", str(big))
    run_id = await following.first_line()  # at once, before anything ran
    assert run_id.startswith("plr_")
    await following.wait_err(f"train queued: {UNPLACEABLE}")
    assert await following.interrupt() == 130
    assert (
        f"stopped following; {run_id} keeps running: cancel it with runplane pipeline "
        f"cancel {run_id}" in following.err.decode()
    )
    async with server.client() as client:
        assert (await client.get(f"/v1/pipelines/{run_id}")).json()["status"] == "running"

    got = (await cli(server.url, "pipeline", "get", run_id)).stdout.decode()
    assert UNPLACEABLE in got
    cancelled = await cli(server.url, "pipeline", "cancel", run_id)
    assert cancelled.returncode == 0 and cancelled.stdout.decode().strip() == (
        f"{run_id} cancelled"
    )


async def test_submit_and_session_follow_say_why_they_wait(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    await _agent(server, start_agent, "sessnode")
    job = Running(server.url, "submit", "-f", "--cpu", "64", "shell", "--", "echo", "hi")
    await job.wait_err(UNPLACEABLE)
    job_id = job.err.decode().split("submitted ")[1].split()[0]
    assert await job.interrupt() == 130
    assert (
        f"stopped following; {job_id} keeps running: cancel it with runplane cancel {job_id}"
        in job.err.decode()
    )
    assert (await cli(server.url, "cancel", job_id)).returncode == 0

    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "name: big\n"
        "pod:\n"
        "  services:\n"
        "    - {name: sim, stack: shell, command: [sleep, '60'], cpu_cores: 64}\n"
        "    - {name: ctl, stack: shell, needs: [sim], command: [sleep, '60']}\n"
    )
    session = Running(server.url, "session", "create", "-f", str(pod))
    session_id = await session.first_line()
    assert session_id.startswith("ses_")
    await session.wait_err(UNPLACEABLE)
    assert await session.interrupt() == 130
    assert f"runplane session stop {session_id}" in session.err.decode()
    got = await cli(server.url, "session", "get", session_id)
    assert got.stdout.decode().splitlines() == [
        f"{session_id} launching",
        "  sim (shell)",
        "  ctl (shell) after sim",
    ]
    assert "waiting: pod job job_" in got.stderr.decode()
    assert UNPLACEABLE in got.stderr.decode()
    assert (await cli(server.url, "session", "stop", session_id)).returncode == 0


async def test_ls_shows_names_nodes_and_times_and_the_sweep_table(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await _agent(server, start_agent, "tablenode")
    script = "import sys\nprint('hello from a long script that goes on', sys.argv)"
    done = await cli(
        server.url, "submit", "-f", "--project", "vision", "shell", "--", "python3", "-c", script
    )
    assert done.returncode == 0, done.stderr
    listed = (await cli(server.url, "ls", "--project", "vision")).stdout.decode().splitlines()
    assert listed[0].split() == [
        "JOB", "NAME", "STACK", "PHASE", "NODE", "DURATION", "CREATED", "WAITING"
    ]  # fmt: skip
    assert len(listed) == 2
    row = listed[1]
    assert "python3 -c 'import sys …" in row  # the first line only
    assert " tablenode " in row and "node_" not in row
    assert " s ago" in row and "succeeded" in row
    shown = (await cli(server.url, "get", row.split()[0])).stdout.decode()
    assert "\nnode         tablenode (node_" in shown and " ago (20" in shown
    by_node = (await cli(server.url, "ls", "--node", "tablenode")).stdout.decode()
    assert by_node.count("\n") >= 2
    assert (await cli(server.url, "ls", "--node", "othernode")).stdout.decode().count("\n") == 1
    assert (await cli(server.url, "ls", "--project", "none")).stdout.decode().count("\n") == 1

    swept = await cli(
        server.url, "submit", "sim-cartpole", "--sweep", "episodes=2,3", "--sweep", "epsilon=0,1"
    )
    array_id = swept.stdout.decode().splitlines()[0]
    async with server.client() as client:

        async def ended() -> bool:
            jobs = (await client.get("/v1/jobs", params={"array": array_id})).json()
            return all(j["phase"] == "succeeded" for j in jobs)

        await wait_for(ended, 120, "the sweep")
    table = json.loads((await cli(server.url, "ls", "--array", array_id, "-o", "json")).stdout)
    assert table["array_id"] == array_id
    assert table["config_keys"] == ["episodes", "epsilon"]
    assert {"reward", "mean_reward"} <= set(table["metric_keys"])
    rows = table["rows"]
    assert [r["index"] for r in rows] == [0, 1, 2, 3]
    assert [r["config"] for r in rows] == [
        {"episodes": e, "epsilon": x} for e in (2, 3) for x in (0, 1)
    ]
    top = max(r["metrics"]["mean_reward"] for r in rows)  # sim-cartpole: higher is better
    best = table["best"]["mean_reward"]
    assert next(r for r in rows if r["job_id"] == best)["metrics"]["mean_reward"] == top
    text = (await cli(server.url, "ls", "--array", array_id)).stdout.decode().splitlines()
    header = text[0].split()
    assert header[:5] == ["INDEX", "JOB", "PHASE", "episodes", "epsilon"]
    column = header.index("mean_reward")
    marked = [line.split()[1] for line in text[1:] if line.split()[column].endswith("*")]
    assert marked == [best]
    # a job running its stack's own program is named by the stack and what it was given
    # (the sweep's values; the stack's defaults left out), not by its script's first line
    named = (await cli(server.url, "ls", "--stack", "sim-cartpole")).stdout.decode()
    assert "sim-cartpole episodes=3 epsilon=1 " in named and "python3 -c" not in named

    for verb in ("ls", "get"):
        helped = " ".join((await cli(server.url, verb, "--help")).stdout.decode().split())
        assert "`attempt` is the job's run number, 1-based" in helped
        assert "infrastructure requeues" in helped
