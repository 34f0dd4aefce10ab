"""Node ownership in placement, with a real agent enrolled by an org's join token: it runs
that org's jobs and never another org's (whose jobs wait, saying why) until the owner
grants that org its nodes; after the grant is revoked, new jobs of that org wait again."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

from .conftest import ADMIN, StartAgent, e2e_settings, start_server, wait_for

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}


async def member_of(client: httpx.AsyncClient, org: str, role: str = "member") -> dict[str, str]:
    minted = await client.post(
        "/v1/auth/tokens",
        json={"subject": f"{role}-{org}", "org_id": org, "role": role},
        headers=ADMIN_H,
    )
    assert minted.status_code == 201, minted.text
    return {"Authorization": f"Bearer {minted.json()['token']}"}


async def test_an_org_node_never_runs_another_orgs_jobs(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    server = await start_server(nursery, e2e_settings(tmp_path / "server", auth="required"))
    async with server.client() as client:
        join = await client.post(
            "/v1/nodes/join-tokens", json={"org_id": "org_alpha"}, headers=ADMIN_H
        )
        assert join.status_code == 201, join.text
        start_agent(server.url, "alpha-box", "--join-token", join.json()["token"])

        async def online() -> list[dict[str, object]]:
            return [
                n
                for n in (await client.get("/v1/nodes", headers=ADMIN_H)).json()
                if n["status"] == "online"
            ]

        await wait_for(online, 30, "the org's node")
        alpha, beta = await member_of(client, "org_alpha"), await member_of(client, "org_beta")
        body = {"stack": "shell", "command": ["echo", "hi"]}
        theirs = (await client.post("/v1/jobs", json=body, headers=beta)).json()["job_id"]
        ours = (await client.post("/v1/jobs", json=body, headers=alpha)).json()["job_id"]

        async def done() -> dict[str, object] | None:
            view = (await client.get(f"/v1/jobs/{ours}", headers=alpha)).json()
            return view if view["phase"] in ("succeeded", "failed") else None

        finished = await wait_for(done, 60, "org alpha's job")
        assert finished["phase"] == "succeeded"

        async def explained() -> dict[str, object] | None:
            view = (await client.get(f"/v1/jobs/{theirs}", headers=beta)).json()
            return view if "your org" in str(view.get("wait_reason", "")) else None

        waiting = await wait_for(explained, 30, "org beta's job to say why it waits")
        assert waiting["phase"] == "queued" and waiting["node_id"] == ""
        assert "1 node belongs to another org" in str(waiting["wait_reason"])
        await trio.sleep(1.0)  # and it stays off the node
        still = (await client.get(f"/v1/jobs/{theirs}", headers=beta)).json()
        assert still["phase"] == "queued"

        owner = await member_of(client, "org_alpha", "owner")
        granted = await client.post(
            "/v1/nodes/grants", json={"grantee_org": "org_beta"}, headers=owner
        )
        assert granted.status_code == 201, granted.text

        async def ran(job_id: str) -> dict[str, object] | None:
            view = (await client.get(f"/v1/jobs/{job_id}", headers=beta)).json()
            return view if view["phase"] in ("succeeded", "failed") else None

        assert (await wait_for(lambda: ran(theirs), 60, "beta's job once granted"))[
            "phase"
        ] == "succeeded"
        revoked = await client.delete(f"/v1/nodes/grants/{granted.json()['id']}", headers=owner)
        assert revoked.status_code == 204
        later = (await client.post("/v1/jobs", json=body, headers=beta)).json()["job_id"]
        await trio.sleep(1.5)
        after = (await client.get(f"/v1/jobs/{later}", headers=beta)).json()
        assert after["phase"] == "queued", after
    server.stop.set()
    await server.done.wait()
