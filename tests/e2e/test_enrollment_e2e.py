"""Enrollment with a real agent process: a join token sets the node's tier, the credential
is reused on reconnect, and a revoked credential is refused with a clear line."""

from __future__ import annotations

from pathlib import Path

import trio

from .conftest import ADMIN, LiveServer, StartAgent, online_nodes, saved_credential, wait_for

AUTH = {"Authorization": f"Bearer {ADMIN}"}


async def test_join_token_enrolls_with_its_tier_and_credential_is_reused(
    server: LiveServer, start_agent: StartAgent
) -> None:
    async with server.client() as client:
        minted = await client.post(
            "/v1/nodes/join-tokens", json={"tier": "trusted", "label": "e2e"}, headers=AUTH
        )
        assert minted.status_code == 201
        token = minted.json()["token"]
        agent = start_agent(server.url, "trusted-box", "--join-token", token)
        node = (await wait_for(lambda: online_nodes(client), 30, "the agent"))[0]
        assert node["tier"] == "trusted"
        credential = await saved_credential(agent)
        assert credential.startswith("rpn_")
        assert agent.credential_file.stat().st_mode & 0o077 == 0
        assert agent.terminate() == 0
        # the token is revoked: the agent comes back on its credential, not the token
        tokens = (await client.get("/v1/nodes/join-tokens", headers=AUTH)).json()
        await client.delete(f"/v1/nodes/join-tokens/{tokens[0]['id']}", headers=AUTH)
        start_agent(server.url, "trusted-box", "--join-token", token)
        again = await wait_for(lambda: online_nodes(client), 30, "the agent to come back")
        assert [n["id"] for n in again] == [node["id"]]


async def test_revoked_credential_is_refused_with_one_line(
    server: LiveServer, start_agent: StartAgent, tmp_path: Path
) -> None:
    from runplane.nodes import enrollment

    agent = start_agent(server.url, "doomed")
    async with server.client() as client:
        node = (await wait_for(lambda: online_nodes(client), 30, "the agent"))[0]
    await saved_credential(agent)  # stopped before that, it would enroll again as a new node
    assert agent.terminate() == 0
    assert await enrollment.revoke_node_credential(server.root.store, node["id"])
    again = start_agent(server.url, "doomed")
    code = await trio.to_thread.run_sync(lambda: again.proc.wait(timeout=30))
    assert code == 1
    last = again.log.read_text().strip().splitlines()[-1]
    assert last.startswith("runplane agent:") and "credential" in last
