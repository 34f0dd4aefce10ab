"""Isolation on a shared node, with real agent processes (`python -m runplane agent`): a
job cannot copy the node's files beyond the operator's ``--host-path`` allowlist (never
the agent's credential), a root agent runs jobs as its unprivileged job user who cannot
read the credential (outputs still collected, only the job's own files), and a job asking
``isolation: gvisor`` of a process-executor node fails saying why instead of running."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest

from runplane.agent.isolation import default_work_root
from runplane.agent.uids import UidRange

from .conftest import (
    ADMIN,
    LiveServer,
    StartAgent,
    job_logs,
    online_nodes,
    saved_credential,
    submit,
    wait_for,
    wait_phase,
)

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (jobs run as a job user)")
NOT_ALLOWED = "is not under a host path this node allows"
OPERATOR = "the node's operator allows host paths with `runplane agent --host-path DIR`"
OWN_DATA = "is inside the agent's own data dir or job working directories"


async def _run(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    job_id = await submit(client, {"stack": "shell", **body})
    return await wait_phase(client, job_id, "succeeded", "failed", "timeout", "cancelled")


async def test_file_inputs_come_only_from_allowed_host_paths(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path, work_dir: Path
) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "data.txt").write_text("shared data\n")
    (shared / "passwd-link").symlink_to("/etc/passwd")
    outside = tmp_path.parent / f"{tmp_path.name}-outside.txt"
    outside.write_text("not shared\n")
    # tmp_path holds the agent's data dir: allowed around it, the credential is still refused
    agent = start_agent(
        server.url, "paths", "--host-path", str(shared), "--host-path", str(tmp_path),
        "--work-dir", str(work_dir),
    )  # fmt: skip
    try:
        async with server.client() as client:
            await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
            credential = agent.credential_file
            await saved_credential(agent)

            def file_input(ref: str | Path) -> dict[str, Any]:
                return {"command": ["cat", "in.txt"], "inputs": [
                    {"type": "file", "ref": str(ref), "path": "/work/in.txt"}
                ]}  # fmt: skip

            refused = {
                str(credential): OWN_DATA,
                f"file://{credential}": OWN_DATA,
                "/etc/passwd": f"{NOT_ALLOWED} (allowed: {shared}, {tmp_path}); {OPERATOR}",
                str(shared / "passwd-link"): f"(it resolves to /etc/passwd) {NOT_ALLOWED}",
                f"{shared}/../../{outside.name}": NOT_ALLOWED,
            }
            for ref, why in refused.items():
                view = await _run(client, file_input(ref))
                assert view["phase"] == "failed", (ref, view)
                assert view["error"].startswith(f"inputs[0] (file {ref} at /work/in.txt): "), view
                assert why in view["error"], (ref, view["error"])
                assert view["artifacts"] == []
            view = await _run(
                client,
                {
                    "inputs": [{"type": "dir", "ref": str(agent.data_dir), "path": "/work/d"}],
                    "command": ["true"],
                },
            )
            assert view["phase"] == "failed" and OWN_DATA in view["error"], view

            view = await _run(client, file_input(shared / "data.txt"))
            assert view["phase"] == "succeeded", view
            assert await job_logs(client, view["job_id"], "stdout") == ["shared data"]
    finally:
        outside.unlink()


@root_only
async def test_a_root_agents_jobs_run_as_its_job_user_and_cannot_read_the_credential(
    server: LiveServer, start_agent: StartAgent
) -> None:
    agent = start_agent(server.url, "shared")  # no flags: the defaults
    work_root = default_work_root(agent.data_dir)
    try:
        async with server.client() as client:
            await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
            credential_text = await saved_credential(agent)
            credential = agent.credential_file
            script = (
                "id -u; id -G; echo HOME=$HOME; "
                f"cat {credential} && echo LEAKED; ls {agent.data_dir} && echo LISTED; "
                "mkdir -p out && echo result > out/result.txt && "
                f"ln -s {credential} out/credential"
            )
            view = await _run(
                client,
                {
                    "command": ["sh", "-c", script],
                    "outputs": [{"artifact": "out", "glob": "out/**"}],
                },
            )
            assert view["phase"] == "succeeded", view
            stdout = await job_logs(client, view["job_id"], "stdout")
            stderr = await job_logs(client, view["job_id"], "stderr")
            system = await job_logs(client, view["job_id"], "system")
    finally:
        shutil.rmtree(work_root, ignore_errors=True)

    uid = int(stdout[0])
    assert uid in UidRange.default()  # a uid of its own (tests/agent/test_job_uids.py)
    assert stdout[1] == str(uid)  # its own group only, none of root's
    assert stdout[2] == f"HOME={work_root}/{view['job_id']}/1"
    assert "LEAKED" not in stdout and "LISTED" not in stdout
    assert not any(credential_text in line for line in stdout + stderr + system)
    assert sum("Permission denied" in line for line in stderr) == 2, stderr
    # the job's outputs are still collected; a link to the credential is not uploaded
    refs = {a["ref"] for a in view["artifacts"]}
    assert refs == {f"/v1/artifacts/{view['job_id']}/out/result.txt"}
    assert "output out/credential skipped: not a regular file inside /work" in system
    async with server.client() as client:
        got = await client.get(f"/v1/artifacts/{view['job_id']}/out/result.txt")
        assert got.content == b"result\n"

    assert stat.S_IMODE(agent.data_dir.stat().st_mode) == 0o700
    assert agent.data_dir.stat().st_uid == 0
    assert stat.S_IMODE(credential.stat().st_mode) == 0o600
    assert not work_root.exists() or stat.S_IMODE(work_root.stat().st_mode) == 0o711


TENANT_KEY = "zz-private-value-123"
SECRET = "s3cr3t-of-job-a-0123456789"
#: the issue's probe: every process's environment, searched for job A's values
ENVIRON_SCAN = (
    'for f in /proc/[0-9]*/environ; do tr "\\0" "\\n" < $f | grep -e OTHER_TENANT -e s3cr3t; '
    "done 2>/dev/null; echo scanned"
)


@root_only
async def test_a_job_cannot_read_the_environment_of_another_running_job(
    server: LiveServer, start_agent: StartAgent
) -> None:
    """Issue 35: job B scanned /proc/*/environ and printed job A's env and secrets (both
    ran as one uid). Now each attempt has its own uid: B finds nothing of A."""
    agent = start_agent(server.url, "walls")  # no flags: the defaults
    try:
        async with server.client() as client:
            put = await client.put(
                "/v1/secrets/JOB_A_TOKEN?org=org_default",
                json={"value": SECRET},
                headers={"Authorization": f"Bearer {ADMIN}"},
            )
            assert put.status_code == 201, put.text
            await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
            a_id = await submit(
                client,
                {
                    "stack": "shell",
                    "command": ["sh", "-c", "id -u; exec sleep 30"],
                    "env": {"OTHER_TENANT_KEY": TENANT_KEY, "T": "${secrets.JOB_A_TOKEN}"},
                },
            )
            await wait_phase(client, a_id, "running")
            b = await _run(client, {"command": ["sh", "-c", f"id -u; {ENVIRON_SCAN}"]})
            assert b["phase"] == "succeeded", b
            b_out = await job_logs(client, b["job_id"], "stdout")
            a_out = await job_logs(client, a_id, "stdout")
            await client.post(f"/v1/jobs/{a_id}/cancel")
            await wait_phase(client, a_id, "cancelled", "failed", "succeeded")
    finally:
        shutil.rmtree(default_work_root(agent.data_dir), ignore_errors=True)
    assert b_out[-1] == "scanned"
    assert b_out[1:] == ["scanned"], b_out  # before: OTHER_TENANT_KEY=zz-private-value-123
    assert a_out[0] != b_out[0] and {int(a_out[0]), int(b_out[0])} <= set(
        range(UidRange.default().first, UidRange.default().last + 1)
    )


async def test_a_job_asking_gvisor_of_a_process_node_fails_saying_why(
    server: LiveServer, start_agent: StartAgent, work_dir: Path
) -> None:
    # a node that claims the capability (misconfigured) is chosen; its agent refuses
    start_agent(
        server.url, "claims-gvisor", "--capability", "isolation-gvisor", "--work-dir",
        str(work_dir),
    )  # fmt: skip
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        view = await _run(client, {"command": ["echo", "ran"], "isolation": "gvisor"})
        stdout = await job_logs(client, view["job_id"], "stdout")
        system = await job_logs(client, view["job_id"], "system")
    refusal = (
        "node claims-gvisor cannot give isolation gvisor: its process executor runs jobs as "
        "plain processes; gvisor needs a container executor (a node with the capability "
        "isolation-gvisor)"
    )
    assert view["phase"] == "failed", view
    assert view["error"] == refusal
    # nothing was prepared or started (the server's own line says where the attempt went)
    assert stdout == []
    assert [line for line in system if not line.startswith("attempt 1 on ")] == [refusal]
    assert _entries(work_dir) == []


def _entries(directory: Path) -> list[str]:
    return sorted(os.listdir(directory)) if directory.exists() else []
