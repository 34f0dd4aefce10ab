"""Every runnable example of the docs runs as written (issue 40: on a 2-core machine with no
GPU) against a real server with a real agent.

An example is marked in its Markdown file by an HTML comment right before its fenced block:

* ``<!-- example: sh -->``: a shell snippet, run with ``sh -e`` in a directory where
  ``runplane`` and ``.venv/bin/runplane`` are this tree's CLI, with ``RUNPLANE_URL``,
  ``RP`` and ``RUNPLANE_ADMIN_TOKEN`` set and ``localhost:8080`` read as the test
  server's address (the only change made to the text);
* ``<!-- example: python -->``: a Python snippet, run the same way with this Python;
* ``<!-- example: job -->``: a ``POST /v1/runs`` body; the job must succeed;
* ``<!-- example: pipeline -->``: a pipeline body, run with ``runplane pipeline run -f``;
  it must succeed;
* ``<!-- example: session -->``: a session body, created with ``runplane session create
  -f``; it must become ``ready`` (then it is stopped).

``EXPECTED`` names the examples there must be, so removing a marker (or the block after
it) fails the test as surely as breaking the example does."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

import httpx
import trio

from tests.e2e.conftest import ADMIN, LiveServer, StartAgent, online_nodes, wait_for
from tests.e2e.test_cli_e2e import cli, env_for

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"^<!-- example: (\w+) -->$", re.M)  # a line of its own
EXAMPLE = re.compile(r"^<!-- example: (\w+) -->\n```(\w*)\n(.*?)\n```", re.S | re.M)
EXPECTED = Counter(
    {
        ("README.md", "sh"): 2,
        ("docs/api.md", "sh"): 2,
        ("docs/cli.md", "sh"): 1,
        ("docs/cli.md", "python"): 1,
        ("docs/schedules.md", "sh"): 1,
        ("docs/secrets.md", "sh"): 1,
        ("docs/sharing.md", "sh"): 1,
        ("docs/jobs.md", "sh"): 1,
        ("docs/jobs.md", "job"): 1,
        ("docs/pipelines.md", "pipeline"): 1,
        ("docs/sessions.md", "session"): 1,
    }
)
LIVE = ("queued", "assigned", "pulling", "running")


def examples() -> list[tuple[str, str, str]]:
    """(file, kind, text) of every marked example, in file order."""
    found = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        name = str(path.relative_to(ROOT))
        marked = EXAMPLE.findall(text)
        assert len(marked) == len(MARKER.findall(text)), f"{name}: a marker without its block"
        found += [(name, kind, body) for kind, _, body in marked]
    return found


def test_every_expected_example_is_marked() -> None:
    found = Counter((name, kind) for name, kind, _ in examples())
    assert found >= EXPECTED, f"missing: {EXPECTED - found}"


def _runplane_dir(tmp_path: Path) -> Path:
    """A directory holding ``.venv/bin/runplane``: this tree's CLI."""
    bin_dir = tmp_path / "cwd" / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    wrapper = bin_dir / "runplane"
    wrapper.write_text(
        f'#!/bin/sh\nPYTHONPATH="{ROOT}${{PYTHONPATH:+:$PYTHONPATH}}" '
        f'exec "{sys.executable}" -m runplane "$@"\n'
    )
    wrapper.chmod(0o755)
    return tmp_path / "cwd"


async def _run_script(url: str, kind: str, script: str, cwd: Path, token: str) -> None:
    env = env_for(url)
    env["PATH"] = f"{cwd / '.venv' / 'bin'}:{env['PATH']}"
    env["PYTHONPATH"] = f"{ROOT}:{env['PYTHONPATH']}" if env.get("PYTHONPATH") else str(ROOT)
    env.update(RP=url, RUNPLANE_ADMIN_TOKEN=ADMIN, TOKEN=token, OWNER_TOKEN=token)
    text = script.replace("localhost:8080", url.removeprefix("http://"))
    shell = ["sh", "-e", "-c"] if kind == "sh" else [sys.executable, "-c"]
    with trio.fail_after(300):  # the server runs in this process: never block it
        ran = await trio.run_process(
            [*shell, text],
            cwd=cwd,
            env=env,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out = ran.stdout.decode()
    assert ran.returncode == 0, (script, out, ran.stderr.decode())
    assert "runplane.dev/problems/" not in out, (script, out)  # curl -s exits 0 on a 4xx


async def _jobs(client: httpx.AsyncClient) -> dict[str, str]:
    """job id -> phase of every job."""
    jobs = (await client.get("/v1/jobs", params={"limit": 5000})).json()
    return {j["job_id"]: j["phase"] for j in jobs}


async def _all_ended(client: httpx.AsyncClient, before: set[str]) -> dict[str, str]:
    """Wait until every job ended; the phases of those made since ``before``."""

    async def ended() -> dict[str, str] | None:
        now = await _jobs(client)
        return None if any(p in LIVE for p in now.values()) else now

    now = await wait_for(ended, 180, "every job an example started to end")
    return {k: v for k, v in now.items() if k not in before}


async def _owner_token(client: httpx.AsyncClient) -> str:
    """An org owner's token (what ``$TOKEN`` and ``$OWNER_TOKEN`` stand for)."""
    minted = await client.post(
        "/v1/auth/tokens",
        json={"subject": "docs-reader", "role": "owner"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert minted.status_code == 201, minted.text
    return str(minted.json()["token"])


async def _run_job(client: httpx.AsyncClient, body: str) -> None:
    job = (await client.post("/v1/runs", content=body)).json()
    assert "job_id" in job, job

    async def phase() -> str | None:
        now = (await client.get(f"/v1/jobs/{job['job_id']}")).json()["phase"]
        return None if now in LIVE else now

    assert await wait_for(phase, 120, "the example job") == "succeeded"


async def _run_flow(url: str, kind: str, body: str, tmp_path: Path) -> None:
    spec = tmp_path / f"{kind}.json"
    spec.write_text(body)
    if kind == "pipeline":
        ran = await cli(url, "pipeline", "run", "-f", str(spec))
        assert ran.returncode == 0, ran.stderr.decode()
        return
    made = await cli(url, "session", "create", "-f", str(spec))
    assert made.returncode == 0, made.stderr.decode()
    session_id, phase = made.stdout.decode().splitlines()[1].split()
    assert phase == "ready", made.stderr.decode()
    assert (await cli(url, "session", "stop", session_id)).returncode == 0


async def test_every_marked_example_runs_as_written(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    # like the server's own local agent (scripts/serve): limits it cannot enforce are
    # best effort
    start_agent(server.url, "docs", "--best-effort-limits")
    cwd = _runplane_dir(tmp_path)
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        token = await _owner_token(client)
        for name, kind, body in examples():
            before = set(await _jobs(client))
            if kind in ("sh", "python"):
                await _run_script(server.url, kind, body, cwd, token)
            elif kind == "job":
                await _run_job(client, body)
            elif kind in ("pipeline", "session"):
                await _run_flow(server.url, kind, body, tmp_path)
            else:
                raise AssertionError(f"{name}: unknown example kind {kind!r}")
            made = await _all_ended(client, before)
            if kind in ("sh", "python"):  # what a snippet started ran (or it cancelled it)
                bad = {k: v for k, v in made.items() if v not in ("succeeded", "cancelled")}
                assert not bad, (name, body, bad)
