"""The user CLI and the Python client against a live server with a real agent
(docs/cli.md): ``runplane submit --follow`` prints the job's output and exits with its
status; ``-o json`` prints only JSON; an error prints the problem's detail and what to do
next; ``runplane logs -f`` survives a server restart (it resumes with Last-Event-ID and
prints every line once); ``pipeline run`` takes YAML; the client follows a job's events."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import trio

from runplane.client import ApiError, Client
from tests.e2e.conftest import (
    LiveServer,
    StartAgent,
    e2e_settings,
    online_nodes,
    start_server,
    wait_for,
    wait_phase,
)

RUNPLANE = [sys.executable, "-m", "runplane"]


def env_for(url: str) -> dict[str, str]:
    env = dict(os.environ, RUNPLANE_URL=url, NO_COLOR="1", COLUMNS="200")
    env.pop("RUNPLANE_TOKEN", None)
    return env


async def cli(url: str, *args: str) -> trio.CompletedProcess[bytes]:
    with trio.fail_after(120):
        return await trio.run_process(
            [*RUNPLANE, *args],
            env=env_for(url),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )


async def test_submit_follow_prints_the_output_and_exits_with_the_job_status(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    start_agent(server.url, "clinode")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
    ok = await cli(server.url, "submit", "--follow", "shell", "--", "echo", "hi")
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.decode().splitlines() == ["hi"]
    err = ok.stderr.decode()
    assert "submitted job_" in err and "running" in err and "succeeded" in err

    failed = await cli(
        server.url, "submit", "-f", "shell", "--", "sh", "-c", "echo bad >&2; exit 7"
    )
    assert failed.returncode == 7
    assert "bad" in failed.stderr.decode() and "failed" in failed.stderr.decode()

    as_json = await cli(server.url, "submit", "-f", "-o", "json", "shell", "--", "echo", "quiet")
    assert as_json.returncode == 0
    ended = json.loads(as_json.stdout)  # only JSON on stdout: the finished job
    assert ended["phase"] == "succeeded" and ended["exit_code"] == 0

    listed = json.loads((await cli(server.url, "ls", "-o", "json")).stdout)
    assert {j["job_id"] for j in listed} >= {ended["job_id"]}
    table = (await cli(server.url, "ls")).stdout.decode()
    assert ended["job_id"] in table  # ids are never cut

    missing = await cli(server.url, "get", "job_nope")
    assert missing.returncode == 3
    assert "job not found" in missing.stderr.decode()
    assert "runplane ls" in missing.stderr.decode()  # what to do next

    unreachable = await cli("http://127.0.0.1:9", "ls")
    assert unreachable.returncode == 3 and "runplane serve" in unreachable.stderr.decode()

    pipeline = tmp_path / "p.yaml"
    pipeline.write_text(
        "stages:\n"
        "  - {name: a, stack: shell, command: [echo, a]}\n"
        "  - {name: b, stack: shell, command: [echo, b], needs: [a]}\n"
    )
    run = await cli(server.url, "pipeline", "run", "--follow", str(pipeline))
    assert run.returncode == 0, run.stderr
    assert run.stdout.decode().strip().endswith("succeeded")


async def test_a_sweep_runs_one_job_per_combination_on_the_agent(
    server: LiveServer, start_agent: StartAgent
) -> None:
    """``runplane submit --sweep`` posts one job array; every job runs for real with its
    own config, lists with ``ls --array`` and counts in ``GET /v1/arrays/{id}``."""
    start_agent(server.url, "sweepnode")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
    done = await cli(
        server.url,
        "submit",
        "shell",
        "--sweep",
        "message=a,b",
        "--sweep",
        "repeat=1,2",
        "--",
        "sh",
        "-c",
        'for i in $(seq "$RUNPLANE_CONFIG_REPEAT"); do echo "$RUNPLANE_CONFIG_MESSAGE"; done',
    )
    assert done.returncode == 0, done.stderr
    array_id, *job_ids = done.stdout.decode().split()
    assert array_id.startswith("arr_") and len(job_ids) == 4
    async with server.client() as client:
        for job_id in job_ids:
            ended = await wait_phase(client, job_id, "succeeded", "failed", "cancelled")
            assert ended["phase"] == "succeeded", ended
        outputs = []
        for job_id in job_ids:
            logs = (await client.get(f"/v1/jobs/{job_id}/logs?stream=stdout")).json()["logs"]
            outputs.append([entry["line"] for entry in logs])
        array = (await client.get(f"/v1/arrays/{array_id}")).json()
    assert outputs == [["a"], ["a", "a"], ["b"], ["b", "b"]]
    assert array["phases"] == {"succeeded": 4} and array["count"] == 4
    listed = json.loads((await cli(server.url, "ls", "--array", array_id, "-o", "json")).stdout)
    assert sorted(r["job_id"] for r in listed["rows"]) == sorted(job_ids)  # the sweep table
    refused = await cli(server.url, "submit", "-f", "shell", "--sweep", "repeat=1,2")
    assert refused.returncode == 2 and "runplane logs -f" in refused.stderr.decode()


SLOW = "for i in 1 2 3 4 5 6 7 8; do echo line-$i; sleep 0.5; done"


async def test_logs_follow_survives_a_server_restart(
    nursery: trio.Nursery, start_agent: StartAgent, tmp_path: Path
) -> None:
    settings = e2e_settings(tmp_path / "server")
    live = await start_server(nursery, settings, heartbeat_sec=0.5)
    port = int(live.url.rsplit(":", 1)[1].strip("/"))
    start_agent(live.url, "restartnode")
    async with live.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        job_id = (
            await client.post("/v1/jobs", json={"stack": "shell", "command": ["sh", "-c", SLOW]})
        ).json()["job_id"]
        await wait_phase(client, job_id, "running")
    out, errs = tmp_path / "follow.out", tmp_path / "follow.err"
    with out.open("wb") as stdout, errs.open("wb") as stderr:
        follower = await trio.lowlevel.open_process(
            [*RUNPLANE, "logs", "-f", job_id], env=env_for(live.url), stdout=stdout, stderr=stderr
        )
    await wait_for(lambda: _has(out, "line-2"), 30, "the first lines")
    live.stop.set()  # the server goes away mid-run and comes back on the same port
    await live.done.wait()
    await trio.sleep(1.0)
    again = await start_server(nursery, settings, port=port, heartbeat_sec=0.5)
    async with again.client() as client:
        done = await wait_phase(client, job_id, "succeeded", "failed")
    assert done["phase"] == "succeeded", done
    with trio.fail_after(60):
        code = await follower.wait()
    assert code == 0, errs.read_text()
    lines = [line for line in out.read_text().splitlines() if line.startswith("line-")]
    assert lines == [f"line-{i}" for i in range(1, 9)]  # every line, once, in order
    again.stop.set()
    await again.done.wait()


async def _has(path: Path, text: str) -> bool:
    found = trio.Path(path)
    return await found.exists() and text in await found.read_text()


async def test_the_python_client_follows_a_job(server: LiveServer, start_agent: StartAgent) -> None:
    start_agent(server.url, "pynode")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")

    def run() -> tuple[dict[str, object], list[dict[str, object]], str]:
        with Client(server.url) as rp:
            job = rp.submit({"stack": "shell", "command": ["sh", "-c", "echo one; echo two"]})
            events = list(rp.events(str(job["job_id"])))
            try:
                rp.job("job_missing")
            except ApiError as exc:
                missing = f"{exc.status} {exc.detail}"
            return rp.job(str(job["job_id"])), events, missing

    job, events, missing = await trio.to_thread.run_sync(run)
    assert job["phase"] == "succeeded"
    logs = [e["line"] for e in events if e["kind"] == "log" and e.get("stream") == "stdout"]
    assert logs == ["one", "two"]
    assert events[-1]["kind"] == "phase" and events[-1]["phase"] == "succeeded"
    seqs = [e["seq"] for e in events]
    assert seqs == sorted(set(seqs))  # each event once, in order
    assert missing == "404 job not found"
