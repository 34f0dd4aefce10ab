"""Fair share between orgs with a real agent: two orgs' one-slot jobs on one node of 2
slots. Org A submits all its jobs before org B, so queue order alone would run A's first;
fair share makes them take turns (equal weights: the completed counts never differ by
more than 2), and with weights 2:1 A completes about twice as many."""

from __future__ import annotations

from pathlib import Path

import httpx
import trio

from .conftest import ADMIN, StartAgent, e2e_settings, start_server, wait_for

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
#: jobs per org, each ``sleep 0.5``: two runs stay well under a minute together
JOBS = 30
SLEEPER = {"stack": "shell", "command": ["sleep", "0.5"]}


async def member_of(client: httpx.AsyncClient, org: str) -> dict[str, str]:
    minted = await client.post(
        "/v1/auth/tokens",
        json={"subject": f"member-{org}", "org_id": org, "role": "member"},
        headers=ADMIN_H,
    )
    assert minted.status_code == 201, minted.text
    return {"Authorization": f"Bearer {minted.json()['token']}"}


async def succeeded(client: httpx.AsyncClient, member: dict[str, str]) -> int:
    """The org's jobs that succeeded (its analytics summary: the caller's org only)."""
    response = await client.get("/v1/analytics/jobs?window=15m&buckets=1", headers=member)
    assert response.status_code == 200, response.text
    summary = response.json()["summary"]
    assert summary["failed"] == 0, summary
    return int(summary["succeeded"])


async def run_two_orgs(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent, weight_a: float
) -> list[tuple[int, int]]:
    """Submit A's jobs, then B's, start a 2-slot node, and poll the completed counts
    every 0.5 s until every job succeeded: the counts seen, in order."""
    server = await start_server(nursery, e2e_settings(tmp_path / "server", auth="required"))
    async with server.client() as client:
        org_a, org_b = await member_of(client, "org_fs_a"), await member_of(client, "org_fs_b")
        if weight_a != 1:
            put = await client.put(
                "/v1/policy?org=org_fs_a", json={"fair_share_weight": weight_a}, headers=ADMIN_H
            )
            assert put.status_code == 200, put.text
        for member in (org_a, org_b):
            for _ in range(JOBS):
                response = await client.post("/v1/jobs", json=SLEEPER, headers=member)
                assert response.status_code == 202, response.text
        share = (await client.get("/v1/analytics/share", headers=ADMIN_H)).json()
        waiting = {r["org_id"]: (r["waiting_jobs"], r["weight"]) for r in share["orgs"]}
        assert waiting == {"org_fs_a": (JOBS, weight_a), "org_fs_b": (JOBS, 1)}
        join = await client.post("/v1/nodes/join-tokens", json={}, headers=ADMIN_H)
        assert join.status_code == 201, join.text  # a universal node: both orgs run on it
        start_agent(
            server.url, "fair", "--join-token", join.json()["token"],
            "--max-concurrency", "2", "--shared-uid-ok",
        )  # fmt: skip
        seen: list[tuple[int, int]] = []

        async def all_done() -> bool:
            counts = (await succeeded(client, org_a), await succeeded(client, org_b))
            seen.append(counts)
            if counts == (JOBS, JOBS):
                return True
            await trio.sleep(0.5)
            return False

        await wait_for(all_done, 90, "every job to succeed")
    return seen


async def test_equal_weights_take_turns(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    seen = await run_two_orgs(nursery, tmp_path, start_agent, weight_a=1)
    assert max(abs(a - b) for a, b in seen) <= 2, seen


async def test_weights_two_to_one_complete_about_two_to_one(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    seen = await run_two_orgs(nursery, tmp_path, start_agent, weight_a=2)
    a, b = next((a, b) for a, b in seen if a + b >= 20)
    assert b > 0 and 1.5 <= a / b <= 2.5, seen
