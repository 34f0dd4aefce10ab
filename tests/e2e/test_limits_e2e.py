"""Limits that hold on the node, end to end: a real server, real agent processes
(`python -m runplane agent`), real jobs. GPUs assigned disjointly from a node whose
nvidia-smi (the one fake: its output, a boundary we do not own) lists two; a job over its
memory limit fails as out of memory; a limit no node can enforce waits with a reason
until a best-effort node comes; the sandbox executor keeps a job from the agent's
credential and from another job's workdir, which the process executor does not."""

from __future__ import annotations

import os
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from runplane.agent.limits import bwrap_works

from .conftest import (
    LiveServer,
    StartAgent,
    job,
    job_logs,
    online_nodes,
    saved_credential,
    submit,
    wait_for,
    wait_phase,
)

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (cgroups, job user)")
needs_bwrap = pytest.mark.skipif(bwrap_works() is None, reason="bubblewrap cannot run here")
TWO_GPUS = (
    "0, GPU-11111111-2222-3333-4444-000000000000, NVIDIA L4, 23034, 550.54.14\n"
    "1, GPU-11111111-2222-3333-4444-000000000001, NVIDIA L4, 23034, 550.54.14\n"
)
BANNER = "| NVIDIA-SMI 550.54.14   Driver Version: 550.54.14   CUDA Version: 12.4 |\n"


async def _finish(client: httpx.AsyncClient, job_id: str) -> dict[str, Any]:
    return await wait_phase(client, job_id, "succeeded", "failed", "timeout", "cancelled")


def _fake_nvidia_smi(bin_dir: Path) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    script = bin_dir / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'if [ -n "$1" ]; then\n'
        f"cat <<'EOF'\n{TWO_GPUS}EOF\n"
        "else\n"
        f"cat <<'EOF'\n{BANNER}EOF\n"
        "fi\n"
    )
    script.chmod(0o755)


async def test_one_gpu_jobs_get_disjoint_devices_and_a_third_waits(
    server: LiveServer,
    start_agent: StartAgent,
    work_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fake_nvidia_smi(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    start_agent(server.url, "gpus", "--work-dir", str(work_dir), "--max-concurrency", "4")
    body = {
        "stack": "shell",
        "command": ["sh", "-c", 'echo "cuda=$CUDA_VISIBLE_DEVICES"; sleep 60'],
        "limits": {"gpu_count": 1},
    }
    async with server.client() as client:
        nodes = await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        assert nodes[0]["gpus"] == 2
        first, second = await submit(client, body), await submit(client, body)
        for job_id in (first, second):
            await wait_phase(client, job_id, "running")

        async def cuda_line(job_id: str) -> str | None:
            lines = await job_logs(client, job_id, "stdout")
            return lines[0].removeprefix("cuda=") if lines else None

        seen = []
        for job_id in (first, second):
            line = await wait_for(partial(cuda_line, job_id), 30, "the job's output")
            seen.append(line)
        assert sorted(seen) == [
            "GPU-11111111-2222-3333-4444-000000000000",
            "GPU-11111111-2222-3333-4444-000000000001",
        ]
        views = [await job(client, j) for j in (first, second)]
        assert [v["gpus"] for v in views] == [[seen[0]], [seen[1]]]
        third = await submit(client, body)

        async def waiting() -> dict[str, Any] | None:
            view = await job(client, third)
            return view if view.get("wait_reason") else None

        view = await wait_for(waiting, 30, "the third job's wait reason")
        assert view["phase"] == "queued"
        assert "fewer than 1 matching GPU free" in view["wait_reason"]
        node = (await online_nodes(client))[0]
        assert node["used_gpu"] == 2
        held = sorted(d for r in node["running_jobs"] for d in r["gpus"])
        assert held == sorted(seen)
        # the first ends: its device goes to the third
        assert (await client.post(f"/v1/jobs/{first}/cancel")).status_code == 200
        await wait_phase(client, third, "running")
        got = await wait_for(lambda: cuda_line(third), 30, "the third job's output")
        assert got == seen[0]
        for job_id in (second, third):
            await client.post(f"/v1/jobs/{job_id}/cancel")
        # a job asking for no GPU sees none on a GPU node
        plain = await submit(
            client, {"stack": "shell", "command": ["sh", "-c", 'echo "[$CUDA_VISIBLE_DEVICES]"']}
        )
        assert (await _finish(client, plain))["gpus"] == []
        assert await job_logs(client, plain, "stdout") == ["[]"]


@root_only
async def test_a_job_over_its_memory_limit_fails_as_out_of_memory(
    server: LiveServer, start_agent: StartAgent, work_dir: Path
) -> None:
    start_agent(server.url, "mem", "--work-dir", str(work_dir))
    allocate = ["python3", "-c", "b = bytearray(2 * 1024**3); print('allocated')"]
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        small = await submit(
            client, {"stack": "shell", "command": allocate, "limits": {"ram_gb": 1}}
        )
        big = await submit(client, {"stack": "shell", "command": allocate, "limits": {"ram_gb": 4}})
        small_view, big_view = await _finish(client, small), await _finish(client, big)
    assert small_view["phase"] == "failed"
    assert small_view["error"].startswith("out of memory: the job went over its 1 GB memory limit")
    assert big_view["phase"] == "succeeded", big_view


async def test_a_limit_no_node_enforces_waits_until_a_best_effort_node_runs_it(
    server: LiveServer, start_agent: StartAgent, work_dir: Path
) -> None:
    start_agent(server.url, "strict", "--work-dir", str(work_dir))
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        job_id = await submit(
            client,
            {
                "stack": "shell",
                "command": ["echo", "ran"],
                "limits": {"egress_allow": ["pypi.org"]},
            },
        )

        async def waiting() -> dict[str, Any] | None:
            view = await job(client, job_id)
            return view if view.get("wait_reason") else None

        view = await wait_for(waiting, 30, "the wait reason")
        assert view["phase"] == "queued"
        assert "limits.egress_allow (limit-egress)" in view["wait_reason"]
        assert "--best-effort-limits" in view["wait_reason"]
        start_agent(
            server.url, "lenient", "--work-dir", str(work_dir) + "-2", "--best-effort-limits"
        )
        view = await _finish(client, job_id)
        system = await job_logs(client, job_id, "system")
    assert view["phase"] == "succeeded", view
    assert view["node_id"] != ""
    assert any(
        line.startswith("not enforced on node lenient (best effort): limits.egress_allow")
        for line in system
    ), system


@root_only
@needs_bwrap
async def test_a_sandboxed_job_cannot_read_the_credential_or_another_jobs_workdir(
    server: LiveServer, start_agent: StartAgent, work_dir: Path
) -> None:
    results: dict[str, list[str]] = {}
    for executor in ("process", "sandbox"):
        agent = start_agent(
            server.url, executor, "--executor", executor, "--work-dir", f"{work_dir}-{executor}"
        )
        async with server.client() as client:
            await wait_for(
                partial(_node_named, client, executor), 30, f"the {executor} agent online"
            )
            await saved_credential(agent)
            holder = await submit(
                client,
                {"stack": "shell", "command": ["sh", "-c", "echo secret > mine.txt; sleep 60"]},
            )
            holder_view = await wait_phase(client, holder, "running")
            other_dir = Path(f"{work_dir}-{executor}") / holder / "1"
            await wait_for(partial(_exists, other_dir / "mine.txt"), 30, "the first job's file")
            script = (
                f"cat {agent.credential_file} && echo READ-CREDENTIAL; "
                f"cat {other_dir}/mine.txt && echo READ-OTHER; "
                "touch /usr/runplane-probe && echo WROTE-USR; "
                "echo tmp > /tmp/probe-$$ && echo WROTE-TMP; echo done"
            )
            prober = await submit(client, {"stack": "shell", "command": ["sh", "-c", script]})
            view = await _finish(client, prober)
            assert view["phase"] == "succeeded", view
            assert view["node_id"] == holder_view["node_id"]
            results[executor] = await job_logs(client, prober, "stdout")
            await client.post(f"/v1/jobs/{holder}/cancel")
        agent.terminate()
    # the process executor: a uid per job, so not another job's files either (it still
    # sees the host as it is: the credential is root's alone, /tmp is the node's)
    assert results["process"] == ["WROTE-TMP", "done"], results
    # the sandbox: neither the credential nor the other job's workdir; the host read-only
    assert results["sandbox"] == ["WROTE-TMP", "done"], results
    assert not await _exists(Path("/usr/runplane-probe"))


async def _node_named(client: httpx.AsyncClient, name: str) -> bool:
    return any(n["name"] == name for n in await online_nodes(client))


async def _exists(path: Path) -> bool:
    return await trio.to_thread.run_sync(path.exists)
