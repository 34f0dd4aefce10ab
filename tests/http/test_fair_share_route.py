"""Fair share between orgs over HTTP: GET /v1/analytics/share (tenant-filtered) and the
policy document's ``fair_share_weight`` (only the admin token changes it)."""

from __future__ import annotations

from typing import Any

from tests.auth.support import ADMIN_H, mint, ok_json

SHELL = {"stack": "shell", "command": ["true"]}


async def bearer(client: Any, org_id: str, role: str, subject: str) -> dict[str, str]:
    minted = await mint(client, subject=subject, org_id=org_id, role=role)
    return {"Authorization": f"Bearer {minted['token']}"}


async def test_only_the_admin_token_changes_an_org_s_weight(client: Any) -> None:
    owner = await bearer(client, "org_a", "owner", "olga")
    put = await client.put("/v1/policy?org=org_a", json={"fair_share_weight": 2}, headers=ADMIN_H)
    assert (await ok_json(put, 200))["policy"]["fair_share_weight"] == 2
    share = await ok_json(await client.get("/v1/analytics/share", headers=owner), 200)
    assert share["half_life_sec"] == 600
    assert [(r["org_id"], r["weight"], r["waiting_jobs"]) for r in share["orgs"]] == [
        ("org_a", 2, 0)
    ]
    # the owner's own document keeps the weight it leaves out (or sends back as read)
    await ok_json(await client.put("/v1/policy", json={"org": {"max_gpu": 1}}, headers=owner), 200)
    doc = {"org": {"max_gpu": 2}, "fair_share_weight": 2}
    kept = await ok_json(await client.put("/v1/policy", json=doc, headers=owner), 200)
    assert kept["policy"]["fair_share_weight"] == 2 and kept["policy"]["org"] == {"max_gpu": 2}
    # and may not raise it
    raised = await client.put("/v1/policy", json={"fair_share_weight": 50}, headers=owner)
    assert raised.status_code == 403
    body = await raised.get_json()
    assert body["code"] == "forbidden" and "fair_share_weight" in body["detail"]
    assert (await ok_json(await client.get("/v1/policy", headers=owner), 200))["policy"][
        "fair_share_weight"
    ] == 2
    # the admin clears it: the default weight again
    await ok_json(await client.put("/v1/policy?org=org_a", json={}, headers=ADMIN_H), 200)
    share = await ok_json(await client.get("/v1/analytics/share", headers=owner), 200)
    assert share["orgs"][0]["weight"] == 1
    bad = await client.put("/v1/policy?org=org_a", json={"fair_share_weight": 0}, headers=ADMIN_H)
    assert bad.status_code == 400


async def test_each_org_sees_its_own_row_and_the_admin_every_org(client: Any) -> None:
    alice = await bearer(client, "org_a", "member", "alice")
    bob = await bearer(client, "org_b", "member", "bob")
    for headers, count in ((alice, 3), (bob, 1)):
        for _ in range(count):
            await ok_json(await client.post("/v1/jobs", json=SHELL, headers=headers), 202)
    mine = await ok_json(await client.get("/v1/analytics/share", headers=alice), 200)
    assert [(r["org_id"], r["waiting_jobs"]) for r in mine["orgs"]] == [("org_a", 3)]
    row = mine["orgs"][0]
    assert row["share"] == 0 and row["usage"] == 0 and row["weighted_usage"] == 0
    assert row["running"] == {"jobs": 0, "cpu_cores": 0, "ram_gb": 0, "gpus": 0}
    every = await ok_json(await client.get("/v1/analytics/share", headers=ADMIN_H), 200)
    waiting = {r["org_id"]: r["waiting_jobs"] for r in every["orgs"]}
    assert waiting == {"org_a": 3, "org_b": 1}
    # an open deploy's anonymous caller sees every org, as the admin does
    anonymous = await ok_json(await client.get("/v1/analytics/share"), 200)
    assert {r["org_id"] for r in anonymous["orgs"]} == {"org_a", "org_b"}
