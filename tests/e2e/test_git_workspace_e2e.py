"""A job whose workspace is a git connection's repository, for real: the server resolves
the ref to a commit with the connection's token (``git ls-remote`` against git
http-backend behind token auth), a real agent process fetches exactly that commit over
authenticated http with the token handed in its run order, and the token is written
nowhere on the node (docs/git.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio

from runplane.git import connections
from runplane.git.connections import GitConnectionBody
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
from tests.git_server import GitServer, make_repo

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
    nursery: trio.Nursery, tmp_path: Path, data_dir: Path, start_agent: StartAgent
) -> None:
    repos = tmp_path / "repos"
    repos.mkdir()
    commits = make_repo(repos, "team/app.git", {"train.py": "print('trained')\n"})
    git = await GitServer.start(nursery, repos, TOKEN)
    server = await start_server(
        nursery, e2e_settings(data_dir, egress_allow="127.0.0.1"), heartbeat_sec=0.5
    )
    agent = start_agent(server.url, "gitnode")
    async with server.client() as client:
        made = await client.post("/v1/git/connections", json=conn_fields(git))
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
    # both the server (ls-remote) and the agent (fetch) authenticated with the token
    assert len(git.authorizations) >= 3
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
