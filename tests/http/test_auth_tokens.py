"""whoami, roles, and the token routes: MintBody semantics, shown once, hashed at rest,
list views without secrets, revocation effective on the very next request."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.ids import hash_secret
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, bearer, mint, ok_json, store_of


@pytest.fixture
async def required(make_settings: Callable[..., Settings]) -> AsyncIterator[QuartTrio]:
    app = create_app(make_settings(auth="required"))
    async with app.test_app():
        yield app


async def test_whoami(client: Any) -> None:
    anon = await ok_json(await client.get("/v1/auth/whoami"), 200)
    assert anon == {
        "kind": "anon",
        "subject": "anonymous",
        "org_id": "org_default",
        "name": "anonymous",
        "scopes": [],
        "role": None,
        "superuser": False,
    }
    admin = await ok_json(await client.get("/v1/auth/whoami", headers=ADMIN_H), 200)
    assert admin["superuser"] and admin["scopes"] == ["*"] and admin["kind"] == "service"
    token = await mint(client, subject="ci-bot", kind="service", org_id="org_acme", role="member")
    me = await ok_json(await client.get("/v1/auth/whoami", headers=bearer(token["token"])), 200)
    assert (me["kind"], me["subject"], me["org_id"], me["role"]) == (
        "service",
        "ci-bot",
        "org_acme",
        "member",
    )
    assert me["scopes"] == ["runs:submit", "runs:cancel", "runs:priority", "runs:share", "git:read"]


async def test_roles_are_public(required: QuartTrio) -> None:
    roles = await ok_json(await required.test_client().get("/v1/roles"), 200)
    assert [(r["name"], r["scopes"][:1]) for r in roles] == [
        ("owner", ["*"]),
        ("admin", ["*"]),
        ("member", ["runs:submit"]),
        ("viewer", []),
    ]


async def test_mint_shape_and_once(client: Any) -> None:
    response = await client.post(
        "/v1/auth/tokens",
        json={"subject": "alice", "org_id": "org_acme", "name": "laptop", "role": "viewer"},
        headers=ADMIN_H,
    )
    body = await ok_json(response, 201)
    assert response.headers["Cache-Control"] == "no-store"
    assert set(body) == {"id", "token", "kind", "subject", "org_id", "role", "scopes", "note"}
    assert re.match(r"^tok_[0-9a-z]{26}$", body["id"])
    assert re.match(r"^rpt_[A-Za-z0-9_-]{43}$", body["token"])
    assert (body["kind"], body["role"], body["scopes"]) == ("user", "viewer", [])
    assert "only once" in body["note"]
    listed = await ok_json(await client.get("/v1/auth/tokens", headers=ADMIN_H), 200)
    assert listed == [
        {
            "id": body["id"],
            "kind": "user",
            "subject": "alice",
            "org_id": "org_acme",
            "name": "laptop",
            "role": "viewer",
            "scopes": [],
            "created_at": listed[0]["created_at"],
            "revoked": False,
        }
    ]
    assert body["token"] not in str(listed)
    row = await store_of(client.app).fetchone("SELECT * FROM access_tokens")
    assert row is not None and row["secret_hash"] == hash_secret(body["token"])
    assert body["token"] not in str(row)


@pytest.mark.parametrize(
    ("extra", "scopes"),
    [
        ({"role": "owner"}, ["*"]),
        (
            {"role": "member"},
            ["runs:submit", "runs:cancel", "runs:priority", "runs:share", "git:read"],
        ),
        ({"scopes": ["runs:cancel"]}, ["runs:cancel"]),
        ({}, ["*"]),  # a user with neither
        ({"kind": "service"}, []),
    ],
)
async def test_mint_scopes(client: Any, extra: dict[str, Any], scopes: list[str]) -> None:
    body = await mint(client, subject="x", **extra)
    assert body["scopes"] == scopes
    assert body["org_id"] == "org_default"


@pytest.mark.parametrize(
    ("body", "code", "key"),
    [
        ({}, "missing_field", "subject"),
        ({"subject": "  "}, "invalid", "subject"),
        ({"subject": "x", "role": "boss"}, "unknown_role", "role"),
        ({"subject": "x", "scopes": ["runs:fly"]}, "unknown_scope", "scopes"),
        ({"subject": "x", "role": "owner", "scopes": ["*"]}, "role_and_scopes", "role"),
        ({"subject": "x", "org_id": "acme"}, "invalid", "org_id"),
        ({"subject": "x", "kind": "robot"}, "invalid", "kind"),
        ({"subject": "x", "scope": ["*"]}, "unknown_field", "scope"),
    ],
)
async def test_mint_400(client: Any, body: dict[str, Any], code: str, key: str) -> None:
    problem = await ok_json(await client.post("/v1/auth/tokens", json=body, headers=ADMIN_H), 400)
    assert problem["code"] == code and problem["errors"][0]["key"] == key


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", "/v1/auth/tokens"), ("GET", "/v1/auth/tokens"), ("DELETE", "/v1/auth/tokens/tok_x")],
)
async def test_token_routes_need_the_admin_token(client: Any, method: str, path: str) -> None:
    owner = await mint(client, subject="o", role="owner")
    for headers in ({}, bearer("rpt_nonsense"), bearer(owner["token"])):
        response = await client.open(path, method=method, headers=headers, json={"subject": "x"})
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"


async def test_revocation_takes_effect_on_the_next_request(required: QuartTrio) -> None:
    client = required.test_client()
    token = await mint(client, subject="ci", role="member")
    headers = bearer(token["token"])
    assert (await client.get("/v1/jobs", headers=headers)).status_code == 200
    revoked = await ok_json(
        await client.delete(f"/v1/auth/tokens/{token['id']}", headers=ADMIN_H), 200
    )
    assert revoked == {"revoked": token["id"]}
    refused = await client.get("/v1/jobs", headers=headers)
    assert refused.status_code == 401
    problem = await refused.get_json()
    assert problem["code"] == "unauthorized" and "revoked" in problem["detail"]
    assert token["token"] not in problem["detail"]
    # revoking again is a no-op 200; unknown id 404; the list flags it
    assert (
        await client.delete(f"/v1/auth/tokens/{token['id']}", headers=ADMIN_H)
    ).status_code == 200
    assert (await client.delete("/v1/auth/tokens/tok_nope", headers=ADMIN_H)).status_code == 404
    listed = await ok_json(await client.get("/v1/auth/tokens", headers=ADMIN_H), 200)
    assert listed[0]["revoked"] is True


async def test_revoked_token_does_not_fall_back_to_anonymous_in_off_mode(client: Any) -> None:
    """In an open deploy a bad credential is still refused: silently acting as the anonymous
    caller would create runs in org_default instead of the token's org."""
    token = await mint(client, subject="ci", org_id="org_acme", role="member")
    await client.delete(f"/v1/auth/tokens/{token['id']}", headers=ADMIN_H)
    response = await client.post(
        "/v1/jobs", json={"stack": "shell"}, headers=bearer(token["token"])
    )
    assert response.status_code == 401
    assert (await client.post("/v1/jobs", json={"stack": "shell"})).status_code == 202


async def test_list_filters_by_org(client: Any) -> None:
    a = await mint(client, subject="a", org_id="org_a")
    await mint(client, subject="b", org_id="org_b")
    listed = await ok_json(await client.get("/v1/auth/tokens?org_id=org_a", headers=ADMIN_H), 200)
    assert [t["id"] for t in listed] == [a["id"]]
