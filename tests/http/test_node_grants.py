"""Cross-org node grants over the app: who may grant what, the selector's checks, the
listing split into issued and received, revocation, 503 when node sharing is off."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, bearer, mint, ok_json, store_of


async def owner_token(client: Any, org: str) -> dict[str, str]:
    return bearer((await mint(client, subject=f"own-{org}", org_id=org, role="owner"))["token"])


async def enrolled_node(app: Any, org: str) -> str:
    """A node row owned by ``org`` (as its join token's enrollment writes it)."""
    store = store_of(app)
    node_id = f"node_{org}_1"
    await store.execute(
        "INSERT INTO nodes (id, org_id, name, tier, facts, agent_version, channel, status,"
        " created_at, updated_at) VALUES (?, ?, 'box', 'partner', '{}', '1', 'stable',"
        " 'offline', 0, 0)",
        (node_id, org),
    )
    return node_id


async def test_grant_list_and_revoke(app: Any, client: Any) -> None:
    alpha = await owner_token(client, "org_alpha")
    beta = await owner_token(client, "org_beta")
    node = await enrolled_node(app, "org_alpha")
    made = await ok_json(
        await client.post(
            "/v1/nodes/grants",
            json={
                "grantee_org": "org_beta",
                "selector": {"kind": "node", "node_id": node},
                "expires_at": "2099-01-01T00:00:00Z",
            },
            headers=alpha,
        ),
        201,
    )
    assert made["id"].startswith("ng_") and made["owner_org"] == "org_alpha"
    assert made["selector"] == {"kind": "node", "node_id": node}
    assert (
        made["expires_at"] == "2099-01-01T00:00:00.000Z" and made["created_by"] == "own-org_alpha"
    )
    mine = await ok_json(await client.get("/v1/nodes/grants", headers=alpha), 200)
    theirs = await ok_json(await client.get("/v1/nodes/grants", headers=beta), 200)
    assert [g["id"] for g in mine["issued"]] == [made["id"]] and mine["received"] == []
    assert [g["id"] for g in theirs["received"]] == [made["id"]] and theirs["issued"] == []
    # the grantee cannot revoke it, nor see it as its own: 404 as unknown
    assert (await client.delete(f"/v1/nodes/grants/{made['id']}", headers=beta)).status_code == 404
    assert (await client.delete(f"/v1/nodes/grants/{made['id']}", headers=alpha)).status_code == 204
    assert (await client.delete(f"/v1/nodes/grants/{made['id']}", headers=alpha)).status_code == 404
    trail = await ok_json(await client.get("/v1/admin/audit", headers=ADMIN_H), 200)
    actions = [r["action"] for r in trail if r["resource_id"] == made["id"]]
    assert sorted(actions) == ["nodes:grant", "nodes:revoke_grant"]


async def test_what_a_grant_body_may_say(app: Any, client: Any) -> None:
    alpha = await owner_token(client, "org_alpha")
    await enrolled_node(app, "org_alpha")
    foreign = await enrolled_node(app, "org_gamma")
    cases = [
        ({}, 400),  # no grantee_org
        ({"grantee_org": "org_b", "owner_org": "org_gamma"}, 404),  # another org's nodes
        ({"grantee_org": "org_b", "selector": {"kind": "rack"}}, 422),
        ({"grantee_org": "org_b", "selector": {"kind": "node"}}, 422),
        ({"grantee_org": "org_b", "selector": {"kind": "node", "node_id": "node_x"}}, 404),
        ({"grantee_org": "org_b", "selector": {"kind": "node", "node_id": foreign}}, 422),
        ({"grantee_org": "org_b", "selector": {"kind": "tier", "tier": "gold"}}, 422),
        ({"grantee_org": "org_b", "selector": {"kind": "tier", "tier": "partner"}}, 201),
        ({"grantee_org": "org_b"}, 201),  # kind all
    ]
    for body, status in cases:
        response = await client.post("/v1/nodes/grants", json=body, headers=alpha)
        assert response.status_code == status, (body, await response.get_data())
    # the admin token must say whose nodes it grants
    missing = await client.post("/v1/nodes/grants", json={"grantee_org": "org_b"}, headers=ADMIN_H)
    assert missing.status_code == 400
    named = {"grantee_org": "org_b", "owner_org": "org_gamma"}
    assert (await client.post("/v1/nodes/grants", json=named, headers=ADMIN_H)).status_code == 201


async def test_node_sharing_disabled_is_503(make_settings: Callable[..., Settings]) -> None:
    app = create_app(make_settings(disable="node_sharing"))
    async with app.test_app():
        client = app.test_client()
        for method, url in (
            ("POST", "/v1/nodes/grants"),
            ("GET", "/v1/nodes/grants"),
            ("DELETE", "/v1/nodes/grants/ng_x"),
        ):
            response = await client.open(url, method=method, json={}, headers=ADMIN_H)
            assert response.status_code == 503, url


async def test_who_may_patch_a_node_and_what(app: Any, client: Any) -> None:
    alpha = await owner_token(client, "org_alpha")
    beta = await owner_token(client, "org_beta")
    ours = await enrolled_node(app, "org_alpha")
    await store_of(app).execute(
        "UPDATE nodes SET facts = ? WHERE id = ?",
        ('{"cpu_cores": 8, "ram_gb": 32, "max_concurrency": 4}', ours),
    )
    universal = await enrolled_node(app, "org_default")
    patched = await ok_json(
        await client.patch(
            f"/v1/nodes/{ours}",
            json={"cpu_cap": 2, "ram_cap": 16, "max_concurrency": 1, "name": "lab"},
            headers=alpha,
        ),
        200,
    )
    assert patched == {
        "id": ours,
        "name": "lab",
        "disabled": False,
        "cpu_cores": 2,
        "ram_gb": 16,
        "max_concurrency": 1,
    }
    # only the fields given change; 0 lifts a cap
    again = await ok_json(
        await client.patch(f"/v1/nodes/{ours}", json={"cpu_cap": 0}, headers=alpha), 200
    )
    assert (again["cpu_cores"], again["ram_gb"], again["name"]) == (8, 16, "lab")
    for body in ({"cpu_cap": 9}, {"ram_cap": -1}, {"max_concurrency": 5}, {"colour": "red"}):
        response = await client.patch(f"/v1/nodes/{ours}", json=body, headers=alpha)
        assert response.status_code == 400, body
    assert (await client.patch(f"/v1/nodes/{ours}", json={}, headers=beta)).status_code == 404
    assert (await client.patch("/v1/nodes/node_nope", json={}, headers=alpha)).status_code == 404
    refused = await client.patch(f"/v1/nodes/{universal}", json={"disabled": True}, headers=alpha)
    assert refused.status_code == 403
    admin = await client.patch(f"/v1/nodes/{universal}", json={"disabled": True}, headers=ADMIN_H)
    assert (await ok_json(admin, 200))["disabled"] is True
