"""Workspaces, inputs and outputs for real: an uploaded .tar.gz workspace and a git input
(a local bare repository) prepared by a real agent process, outputs uploaded back to the
served app and read byte for byte."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import httpx
import trio

from .conftest import LiveServer, StartAgent, online_nodes, submit, wait_for, wait_phase


def _tar_gz(files: dict[str, bytes], extra: list[tarfile.TarInfo] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755 if name.endswith(".sh") else 0o644
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tar.addfile(info)
    return buf.getvalue()


def _git(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    out = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return out.stdout.strip()


def _bare_repo(tmp_path: Path) -> tuple[Path, str]:
    """A bare repo whose tag v1 has version.txt = 'v1'; main moved on to 'v2'."""
    work = tmp_path / "repo-work"
    work.mkdir()
    _git("init", "-q", "-b", "main", cwd=work)
    (work / "version.txt").write_text("v1\n")
    _git("add", ".", cwd=work)
    _git("commit", "-q", "-m", "one", cwd=work)
    _git("tag", "v1", cwd=work)
    v1 = _git("rev-parse", "HEAD", cwd=work)
    (work / "version.txt").write_text("v2\n")
    _git("commit", "-q", "-am", "two", cwd=work)
    bare = tmp_path / "repo.git"
    _git("clone", "-q", "--bare", str(work), str(bare), cwd=tmp_path)
    return bare, v1


def _found(root: Path, name: str) -> list[Path]:
    return list(root.rglob(name))


async def _upload(client: httpx.AsyncClient, name: str, data: bytes) -> dict[str, Any]:
    response = await client.post("/v1/uploads", files={"file": (name, data)})
    assert response.status_code == 200, response.text
    return dict(response.json())


async def _agent(server: LiveServer, start_agent: StartAgent, *flags: str) -> None:
    start_agent(server.url, "a", *flags)
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")


async def test_uploaded_workspace_and_git_input_run_and_outputs_come_back_identical(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    await _agent(server, start_agent, "--host-path", str(tmp_path))  # the git repo's
    blob = os.urandom(3 * 1024 * 1024 + 17)
    script = (
        b"set -e\n"
        b"mkdir -p out/nested\n"
        b"cp data.bin out/data.bin\n"
        b"cat lib/version.txt > out/nested/version.txt\n"
        b"if echo x > lib/version.txt 2>/dev/null && [ $(id -u) -ne 0 ]; then exit 9; fi\n"
        b"echo done\n"
    )
    archive = _tar_gz({"run.sh": script, "data.bin": blob})
    bare, v1 = _bare_repo(tmp_path)
    async with server.client() as client:
        uploaded = await _upload(client, "code.tar.gz", archive)
        assert uploaded["url"].startswith(server.url + "/v1/artifacts/up_")
        assert uploaded["name"] == "code.tar.gz"
        job_id = await submit(
            client,
            {
                "stack": "shell",
                "command": ["sh", "run.sh"],
                "workspace": {"type": "archive", "ref": uploaded["url"], "path": "/work"},
                "inputs": [
                    {"type": "git", "ref": f"file://{bare}#v1", "path": "/work/lib", "mode": "ro"}
                ],
                "outputs": [
                    {"artifact": "blob", "glob": "out/*.bin"},
                    {"artifact": "texts", "glob": "out/**/*.txt"},
                    {"artifact": "absent", "glob": "nothing/*", "optional": True},
                ],
            },
        )
        view = await wait_phase(client, job_id, "succeeded", "failed", "timeout")
        assert view["phase"] == "succeeded", view
        listed = (await client.get(f"/v1/jobs/{job_id}/artifacts")).json()
        assert listed == view["artifacts"]
        by_ref = {a["ref"]: a for a in listed}
        blob_ref = f"/v1/artifacts/{job_id}/out/data.bin"
        text_ref = f"/v1/artifacts/{job_id}/out/nested/version.txt"
        assert set(by_ref) == {blob_ref, text_ref}
        assert by_ref[blob_ref] == {
            "artifact": "blob",
            "ref": blob_ref,
            "sha256": hashlib.sha256(blob).hexdigest(),
            "size": len(blob),
        }
        assert by_ref[text_ref]["artifact"] == "texts"
        got = await client.get(blob_ref)
        assert got.status_code == 200
        assert got.content == blob
        assert got.headers["content-type"] == "application/octet-stream"
        assert got.headers["x-content-type-options"] == "nosniff"
        assert got.headers["content-disposition"].startswith("attachment")
        assert (await client.get(text_ref)).content == b"v1\n"  # the tag, not main
        logs = (await client.get(f"/v1/jobs/{job_id}/logs?stream=system")).json()["logs"]
        lines = [entry["line"] for entry in logs]
        assert any(f"commit {v1}" in line and "inputs[0]" in line for line in lines), lines
        assert any("uploaded 2 output files" in line for line in lines), lines
        zipped = await client.get(f"/v1/artifacts-zip/{job_id}")
        assert zipped.status_code == 200
        assert zipped.headers["content-type"] == "application/zip"
        with zipfile.ZipFile(io.BytesIO(zipped.content)) as zf:
            assert sorted(zf.namelist()) == ["out/data.bin", "out/nested/version.txt"]
            assert zf.read("out/data.bin") == blob


async def test_missing_output_fails_a_job_that_succeeded_naming_the_glob(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await _agent(server, start_agent)
    async with server.client() as client:
        job_id = await submit(
            client,
            {
                "stack": "shell",
                "command": ["sh", "-c", "mkdir -p out && echo hi > out/a.txt"],
                "outputs": [
                    {"artifact": "a", "glob": "out/a.txt"},
                    {"artifact": "model", "glob": "out/*.pt"},
                ],
            },
        )
        view = await wait_phase(client, job_id, "succeeded", "failed")
        assert view["phase"] == "failed"
        assert "'out/*.pt'" in view["error"] and "matched no files" in view["error"]
        # what did match was still uploaded
        assert [a["ref"] for a in view["artifacts"]] == [f"/v1/artifacts/{job_id}/out/a.txt"]


async def test_outputs_of_a_failed_job_are_kept(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await _agent(server, start_agent)
    async with server.client() as client:
        job_id = await submit(
            client,
            {
                "stack": "shell",
                "command": ["sh", "-c", "echo partial > log.txt; exit 4"],
                "outputs": [{"artifact": "log", "glob": "log.txt"}],
            },
        )
        view = await wait_phase(client, job_id, "succeeded", "failed")
        assert view["phase"] == "failed" and "exit code 4" in view["error"]
        assert view["artifacts"][0]["size"] == len(b"partial\n")


async def test_zip_slip_workspace_fails_the_job_naming_the_mount(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    await _agent(server, start_agent)
    evil = _tar_gz({"ok.txt": b"fine", "../../escaped.txt": b"gotcha"})
    async with server.client() as client:
        uploaded = await _upload(client, "evil.tar.gz", evil)
        job_id = await submit(
            client,
            {
                "stack": "shell",
                "command": ["true"],
                "workspace": {"type": "archive", "ref": uploaded["url"], "path": "/work"},
            },
        )
        view = await wait_phase(client, job_id, "succeeded", "failed")
        assert view["phase"] == "failed"
        assert view["error"].startswith("workspace (archive http"), view["error"]
        assert "escapes the mount" in view["error"]
        assert view["started_at"]  # it never ran, but it ended
    assert not _found(tmp_path, "escaped.txt")


async def test_git_mount_of_a_missing_revision_fails_naming_the_mount(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    await _agent(server, start_agent, "--host-path", str(tmp_path))  # the git repo's
    bare, _ = _bare_repo(tmp_path)
    async with server.client() as client:
        job_id = await submit(
            client,
            {
                "stack": "shell",
                "command": ["true"],
                "inputs": [{"type": "git", "ref": f"file://{bare}#nope", "path": "/work/src"}],
            },
        )
        view = await wait_phase(client, job_id, "succeeded", "failed")
        assert view["phase"] == "failed"
        assert view["error"].startswith("inputs[0] (git file://"), view["error"]
        assert "'nope'" in view["error"]


async def test_bad_mount_path_is_refused_at_submit(server: LiveServer) -> None:
    async with server.client() as client:
        response = await client.post(
            "/v1/jobs",
            json={
                "stack": "shell",
                "inputs": [{"type": "dir", "path": "/work/../../etc"}],
            },
        )
        assert response.status_code == 400
        body = response.json()
        assert body["errors"][0]["key"] == "inputs.0.path"
        assert "'..'" in body["detail"]


async def _stalling_server(nursery: Any) -> str:
    """An http server that answers a download with headers and two bytes, then stalls."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]

    async def stall(stream: trio.SocketStream) -> None:
        await stream.receive_some(4096)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\nPK")
        await trio.sleep_forever()

    nursery.start_soon(trio.serve_listeners, stall, listeners)
    return f"http://127.0.0.1:{port}/slow.zip"


async def test_cancel_while_pulling_and_timeout_while_pulling(
    server: LiveServer, start_agent: StartAgent, nursery: Any
) -> None:
    await _agent(server, start_agent)
    url = await _stalling_server(nursery)
    async with server.client() as client:
        slow = {"type": "archive", "ref": url, "path": "/work"}
        cancelled = await submit(client, {"stack": "shell", "command": ["true"], "workspace": slow})
        await wait_phase(client, cancelled, "pulling")
        result = (await client.post(f"/v1/jobs/{cancelled}/cancel")).json()
        assert result["phase"] == "cancelled" and result["killed_on_node"] is True
        timed = await submit(
            client,
            {
                "stack": "shell",
                "command": ["true"],
                "workspace": slow,
                "limits": {"timeout_sec": 1},
            },
        )
        view = await wait_phase(client, timed, "timeout", "failed", "succeeded")
        assert view["phase"] == "timeout", view
        assert view["error"] == "timed out after 1 s while preparing mounts"
        # the agent is free again: a plain job still runs
        after = await submit(client, {"stack": "shell", "command": ["true"]})
        assert (await wait_phase(client, after, "succeeded", "failed"))["phase"] == "succeeded"
