"""The audit trail: rows for token, join-token and run actions; GET /v1/admin/audit
(Manage, org-narrowed, limit, newest first)."""

from __future__ import annotations

from typing import Any

from runplane.auth import audit
from runplane.auth.principal import ADMIN
from tests.auth.support import ADMIN_H, bearer, mint, ok_json, store_of


async def rows(client: Any, query: str = "", headers: dict[str, str] | None = None) -> Any:
    return await ok_json(
        await client.get(f"/v1/admin/audit{query}", headers=headers or ADMIN_H), 200
    )


async def test_token_and_join_token_actions_are_recorded(client: Any) -> None:
    token = await mint(client, subject="ci", org_id="org_acme", role="member")
    await client.delete(f"/v1/auth/tokens/{token['id']}", headers=ADMIN_H)
    join = await ok_json(
        await client.post("/v1/nodes/join-tokens", json={"org_id": "org_acme"}, headers=ADMIN_H),
        201,
    )
    await client.delete(f"/v1/nodes/join-tokens/{join['id']}", headers=ADMIN_H)
    trail = await rows(client)
    assert [(r["action"], r["resource_type"], r["resource_id"], r["org_id"]) for r in trail] == [
        ("join_tokens:revoke", "join_token", join["id"], "org_acme"),
        ("join_tokens:mint", "join_token", join["id"], "org_acme"),
        ("tokens:revoke", "token", token["id"], "org_acme"),
        ("tokens:mint", "token", token["id"], "org_acme"),
    ]
    for row in trail:
        assert (row["actor_type"], row["actor_id"]) == ("service", "admin")
        assert row["ip"] and row["created_at"].endswith("Z") and row["id"].startswith("aud_")
    minted = trail[3]["after"]
    assert minted["subject"] == "ci" and minted["role"] == "member"
    assert token["token"] not in str(trail) and join["token"] not in str(trail)
    assert set(trail[0]) == {
        "id",
        "org_id",
        "actor_type",
        "actor_id",
        "action",
        "resource_type",
        "resource_id",
        "after",
        "ip",
        "created_at",
    }


async def test_run_submit_and_cancel_are_recorded(client: Any) -> None:
    member = await mint(client, subject="mo", org_id="org_acme", role="member")
    headers = bearer(member["token"])
    job = await ok_json(
        await client.post(
            "/v1/jobs",
            json={"stack": "shell", "env": {"API_TOKEN": "s3cr3t-value"}},
            headers=headers,
        ),
        202,
    )
    await ok_json(await client.post(f"/v1/jobs/{job['job_id']}/cancel", headers=headers), 200)
    rerun = await ok_json(
        await client.post(f"/v1/jobs/{job['job_id']}/rerun", headers=headers), 202
    )
    anon = await ok_json(await client.post("/v1/jobs", json={"stack": "shell"}), 202)
    trail = await rows(client)
    runs = [r for r in trail if r["action"].startswith("runs:")]
    assert [(r["action"], r["resource_id"], r["org_id"], r["actor_id"]) for r in runs] == [
        ("runs:submit", anon["job_id"], "org_default", "anonymous"),
        ("runs:submit", rerun["job_id"], "org_acme", "mo"),
        ("runs:cancel", job["job_id"], "org_acme", "mo"),
        ("runs:submit", job["job_id"], "org_acme", "mo"),
    ]
    assert runs[2]["after"]["cancelled"] is True and runs[2]["after"]["phase"] == "cancelled"
    assert runs[1]["after"]["rerun_of"] == job["job_id"]
    assert runs[3]["after"]["stack"] == "shell" and runs[3]["after"]["phase"] == "queued"
    assert "s3cr3t-value" not in str(trail)


async def test_audit_is_org_narrowed_for_managers(client: Any) -> None:
    acme_admin = await mint(client, subject="ada", org_id="org_acme", role="admin")
    await mint(client, subject="b", org_id="org_beta", role="member")
    narrowed = await rows(client, "?org=org_beta", bearer(acme_admin["token"]))
    assert {r["org_id"] for r in narrowed} == {"org_acme"}  # silently its own org
    assert {r["org_id"] for r in await rows(client, "?org=org_beta")} == {"org_beta"}
    assert {r["org_id"] for r in await rows(client)} == {"org_acme", "org_beta"}
    member = await mint(client, subject="m", org_id="org_acme", role="member")
    assert (await client.get("/v1/admin/audit", headers=bearer(member["token"]))).status_code == 403
    assert (await client.get("/v1/admin/audit")).status_code == 401


async def test_limit_and_order(client: Any) -> None:
    store = store_of(client.app)
    for n in range(105):
        await audit.append(
            store,
            action="runs:submit",
            resource_type="job",
            resource_id=f"job_{n:03d}",
            org_id="org_default",
            actor=ADMIN,
        )
    default = await rows(client)
    assert len(default) == 100 and default[0]["resource_id"] == "job_104"
    assert [r["resource_id"] for r in await rows(client, "?limit=3")] == [
        "job_104",
        "job_103",
        "job_102",
    ]
    for bad in ("0", "x", "100000"):
        assert (
            await client.get(f"/v1/admin/audit?limit={bad}", headers=ADMIN_H)
        ).status_code == 400
