"""A job whose workspace is a git connection's repository, for real: the server resolves
the ref to a commit with the connection's token (``git ls-remote`` against git
http-backend behind token auth), a real agent process fetches exactly that commit over
authenticated http with the token handed in its run order, and the token is written
nowhere on the node; the run reports pending then its end to the provider's commit status
API (a fake that checks the token and the body: tests/fake_provider.py) (docs/git.md)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.git import connections
from runplane.git.connections import GitConnectionBody
from runplane.jobs import repo as jobs_repo
from runplane.webhooks import deliveries
from tests.e2e.conftest import (
    ADMIN,
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
from tests.fake_provider import FakeProvider
from tests.git_server import GitServer, make_repo
from tests.ssh_server import sshd
from tests.tls import self_signed

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
TOKEN = "gitea-token-for-the-e2e-0123456789"
SCRIPT = "cat train.py; git rev-parse HEAD; test -e NEXT && echo has-next || echo no-next"


def conn_fields(git: GitServer) -> dict[str, Any]:
    return {
        "provider": "gitea",
        "base_url": f"http://127.0.0.1:{git.port}",
        "repo_url": git.url("team/app.git"),
        "secret": TOKEN,
    }


def files_containing(top: Path, needle: bytes) -> list[Path]:
    if not top.exists():
        return []
    return [p for p in top.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def test_a_job_clones_the_resolved_commit_with_the_connections_token(
    nursery: trio.Nursery,
    tmp_path: Path,
    data_dir: Path,
    start_agent: StartAgent,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    commits = make_repo(repos, "team/app.git", {"train.py": "print('trained')\n"})
    # the git host speaks https with a private CA, which the server is told to trust the
    # way an operator would (its git and its own client read these)
    cert, tls = self_signed(tmp_path / "tls")
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    monkeypatch.setenv("GIT_SSL_CAINFO", str(cert))
    git = await GitServer.start(nursery, repos, TOKEN, tls=tls)
    assert git.url("x").startswith("https://")
    server = await start_server(
        nursery, e2e_settings(data_dir, egress_allow="127.0.0.1"), heartbeat_sec=0.5
    )
    agent = start_agent(server.url, "gitnode")
    async with server.client() as client:
        # statuses: the next test (here the provider would be the git server itself)
        made = await client.post(
            "/v1/git/connections", json={**conn_fields(git), "report_status": False}
        )
        assert made.status_code == 201, made.text
        conn = made.json()
        assert conn["status"] == "active"
        await wait_for(lambda: online_nodes(client), 30, "the agent")

        def body(ref: str, conn_id: str = conn["id"]) -> dict[str, Any]:
            return {
                "stack": "shell",
                "command": ["sh", "-c", SCRIPT],
                "workspace": {"type": "git", "connection_id": conn_id, "ref": ref},
            }

        at_tag = await submit(client, body("v1"))
        at_head = await submit(client, body(""))
        for job_id, commit, next_file in (
            (at_tag, commits["v1"], "no-next"),
            (at_head, commits["main"], "has-next"),
        ):
            done = await wait_phase(client, job_id, "succeeded", "failed")
            assert done["phase"] == "succeeded", done
            out = await job_logs(client, job_id, "stdout")
            assert out == ["print('trained')", commit, next_file]
            workspace = done["spec"]["workspace"]
            assert workspace["commit"] == commit and workspace["connection_id"] == conn["id"]
            assert workspace["ref"] == f"{git.url('team/app.git')}#{commit}"
            system = await job_logs(client, job_id, "system")
            assert any(f"commit {commit}" in line for line in system), system
        assert (await job(client, at_tag))["spec"]["workspace"]["rev"] == "v1"

        unknown = await client.post("/v1/jobs", json=body("no-such-branch"))
        assert unknown.status_code == 422, unknown.text
        assert unknown.json()["errors"][0]["key"] == "workspace.ref"
        # another org's connection is as unknown as none at all
        root = server.root
        checked = connections.check(GitConnectionBody(**conn_fields(git)))
        theirs = connections.new(root.git.sealer(), checked, org_id="org_other", created_by="t")
        await connections.insert(root.store, theirs)
        foreign = await client.post("/v1/jobs", json=body("v1", conn_id=theirs.id))
        assert foreign.status_code == 404
        missing = await client.post("/v1/jobs", json=body("v1", conn_id="gc_nope"))
        assert missing.status_code == 404

        views = json.dumps([await job(client, at_tag), await job(client, at_head)])
        assert TOKEN not in views
        system = await job_logs(client, at_tag, "system")
        assert any("/v1/git/proxy/" in line for line in system), system

        # the proxy: no ticket, a tampered one, an attempt that is over: 401; no pushes
        refs = f"/v1/git/proxy/{conn['id']}/info/refs?service=git-upload-pack"
        assert (await client.get(refs)).status_code == 401
        row = await jobs_repo.get_row(server.root.store, at_tag, None)
        assert row is not None
        (over,) = (await server.root.git.mount_auth(row, row.attempt)).values()
        refused = await client.get(refs, headers={"Authorization": over})
        assert refused.status_code == 401 and "over" in refused.json()["detail"]
        tampered = "Basic " + base64.b64encode(b"runplane:rpgt_e30.AAAA").decode()
        assert (await client.get(refs, headers={"Authorization": tampered})).status_code == 401
        push = f"/v1/git/proxy/{conn['id']}/info/refs?service=git-receive-pack"
        assert (await client.get(push, headers={"Authorization": over})).status_code == 403
    server.stop.set()
    await server.done.wait()
    # only the server spoke to the repository (ls-remote at submit, the proxied fetches),
    # always with the token; the agent fetched through the server with its attempt's ticket
    assert len(git.authorizations) >= 3
    assert all(base64.b64decode(a[6:]).decode().endswith(":" + TOKEN) for a in git.authorizations)
    # the token is on no file of the node: the agent's data dir, its log, the job dirs
    agent.terminate()
    needle = TOKEN.encode()
    assert files_containing(agent.data_dir, needle) == []
    assert needle not in agent.log.read_bytes()
    workdirs = [
        Path(r["workdir"])
        for r in (
            json.loads(line) for line in agent.log.read_text().splitlines() if line.startswith("{")
        )
        if r.get("msg") == "job started"
    ]
    assert len(workdirs) == 2
    for workdir in workdirs:
        assert files_containing(workdir, needle) == [], workdir
        if (workdir / "work" / ".git" / "config").exists():
            assert b"extraheader" not in (workdir / "work" / ".git" / "config").read_bytes().lower()


def wait_then(gate: Path, code: int) -> str:
    return f"while [ ! -e {gate} ]; do sleep 0.05; done; exit {code}"


@pytest.fixture
def shared() -> Iterator[Path]:
    """Where the test leaves files for its jobs (they run as the job user: not tmp_path)."""
    top = Path(tempfile.mkdtemp(prefix="runplane-e2e-git-"))
    top.chmod(0o777)
    yield top
    shutil.rmtree(top, ignore_errors=True)


async def test_runs_report_pending_then_their_end_on_the_commit(
    nursery: trio.Nursery, tmp_path: Path, data_dir: Path, start_agent: StartAgent, shared: Path
) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    commits = make_repo(repos, "team/app.git", {"train.py": "print('x')\n"})
    git = await GitServer.start(nursery, repos, TOKEN)
    provider = await FakeProvider.start(nursery, "gitea", TOKEN)
    server = await start_server(
        nursery,
        e2e_settings(data_dir, egress_allow="127.0.0.1", public_url="https://runs.example.com"),
        heartbeat_sec=0.5,
    )
    start_agent(server.url, "statusnode")
    async with server.client() as client:
        fields = {**conn_fields(git), "base_url": provider.base_url}
        reporting = (await client.post("/v1/git/connections", json=fields)).json()
        quiet = (
            await client.post("/v1/git/connections", json={**fields, "report_status": False})
        ).json()
        assert reporting["status"] == quiet["status"] == "active"
        await wait_for(lambda: online_nodes(client), 30, "the agent")

        def body(conn_id: str, command: list[str]) -> dict[str, Any]:
            ws = {"type": "git", "connection_id": conn_id, "ref": "main"}
            return {"stack": "shell", "command": command, "workspace": ws}

        # each job waits for the test to see its pending status (a job that ends before
        # its pending status goes reports its end instead: never a stale pending)
        ok_gate, bad_gate = shared / "ok", shared / "bad"
        ok = await submit(client, body(reporting["id"], ["sh", "-c", wait_then(ok_gate, 0)]))
        await provider.wait_for(1)
        ok_gate.touch()
        assert (await wait_phase(client, ok, "succeeded", "failed"))["phase"] == "succeeded"
        await provider.wait_for(2)
        bad = await submit(client, body(reporting["id"], ["sh", "-c", wait_then(bad_gate, 3)]))
        await provider.wait_for(3)
        bad_gate.touch()
        assert (await wait_phase(client, bad, "succeeded", "failed"))["phase"] == "failed"
        got = await provider.wait_for(4)
        silent = await submit(client, body(quiet["id"], ["true"]))
        await wait_phase(client, silent, "succeeded", "failed")
        with trio.move_on_after(1.5):
            await provider.wait_for(5)
    listed = await deliveries_of(server, reporting["id"])
    assert await deliveries_of(server, quiet["id"]) == []
    server.stop.set()
    await server.done.wait()
    assert provider.refused == []
    assert [s.state for s in got] == ["pending", "success", "pending", "failure"]
    assert {s.sha for s in got} == {commits["main"]} and {s.repo for s in got} == {"team/app"}
    assert got[0].body["context"] == "runplane"
    assert got[1].body["target_url"] == f"https://runs.example.com/runs/{ok}"
    assert got[3].body["description"].startswith("failed")
    assert {(d.event, d.status, d.response_code) for d in listed} == {
        ("pending", "delivered", 201),
        ("success", "delivered", 201),
        ("failure", "delivered", 201),
    }


async def deliveries_of(server: Any, conn_id: str) -> list[Any]:
    return await deliveries.recent(server.root.store, conn_id)


@pytest.mark.skipif(os.geteuid() != 0, reason="sshd for the test logs in as root")
async def test_a_deploy_key_connection_is_served_from_the_servers_mirror(
    nursery: trio.Nursery, tmp_path: Path, data_dir: Path, start_agent: StartAgent
) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    commits = make_repo(repos, "team/app.git", {"train.py": "print('over ssh')\n"})
    with sshd(tmp_path / "sshd") as ssh:
        server = await start_server(
            nursery, e2e_settings(data_dir, egress_allow="127.0.0.1"), heartbeat_sec=0.5
        )
        agent = start_agent(server.url, "sshnode")
        async with server.client() as client:
            made = await client.post(
                "/v1/git/connections",
                json={
                    "provider": "forgejo",
                    "base_url": "http://127.0.0.1:9",
                    "repo_url": ssh.url(repos / "team/app.git"),
                    "auth_kind": "ssh_deploy_key",
                    "report_status": False,
                },
            )
            assert made.status_code == 201, made.text
            conn = made.json()
            # the generated key is not a deploy key of the repository yet
            assert conn["status"] == "degraded" and "deploy key" in conn["status_reason"]
            ssh.authorize(conn["ssh_pub"])  # what the repository's owner does
            await wait_for(lambda: online_nodes(client), 30, "the agent")
            body = {
                "stack": "shell",
                "command": ["sh", "-c", SCRIPT],
                "workspace": {"type": "git", "connection_id": conn["id"], "ref": "v1"},
            }
            job_id = await submit(client, body)
            done = await wait_phase(client, job_id, "succeeded", "failed")
            assert done["phase"] == "succeeded", done
            out = await job_logs(client, job_id, "stdout")
            assert out == ["print('over ssh')", commits["v1"], "no-next"]
            listed = (await client.get("/v1/git/connections")).json()
            assert [c["status"] for c in listed if c["id"] == conn["id"]] == ["active"]
        server.stop.set()
        await server.done.wait()
    # the private key stayed on the server, sealed: not in the agent's files or log
    assert mirror_exists(data_dir, conn["id"])  # the server's mirror served the clone
    agent.terminate()
    assert files_containing(agent.data_dir, b"PRIVATE KEY") == []
    assert b"PRIVATE KEY" not in agent.log.read_bytes()


def mirror_exists(data_dir: Path, conn_id: str) -> bool:
    """The server's mirror of the repository exists."""
    return (data_dir / "git-mirrors" / f"{conn_id}.git" / "HEAD").exists()
