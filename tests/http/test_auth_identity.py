"""Identity over HTTP (SQLite and PostgreSQL): seat, login exchange, sessions, logout,
orgs, members and their role rules; and every identity route 404 without a database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, bearer, exchange, mint, ok_json, seat


@pytest.fixture
def app(required_app: QuartTrio) -> QuartTrio:
    return required_app


@pytest.fixture
def client(app: QuartTrio) -> Any:
    return app.test_client()


async def test_seat_exchange_whoami_logout(client: Any) -> None:
    seated = await seat(client, "Ann@Example.com", "Ann")
    assert set(seated) == {"user", "org_id", "login_token", "note"}
    assert seated["user"]["email"] == "ann@example.com" and seated["user"]["status"] == "active"
    assert seated["login_token"].startswith("rpl_")
    session = await exchange(client, seated["login_token"])
    assert set(session) == {
        "session_token",
        "expires_at",
        "user_id",
        "org_id",
        "role",
        "scopes",
        "note",
    }
    assert (session["user_id"], session["org_id"], session["role"]) == (
        seated["user"]["id"],
        seated["org_id"],
        "owner",
    )
    headers = bearer(session["session_token"])
    me = await ok_json(await client.get("/v1/auth/whoami", headers=headers), 200)
    assert (me["kind"], me["subject"], me["name"]) == ("user", seated["user"]["id"], "Ann")
    assert (await client.get("/v1/jobs", headers=headers)).status_code == 200

    assert (await client.post("/v1/auth/logout", headers=headers)).status_code == 204
    assert (await client.get("/v1/jobs", headers=headers)).status_code == 401
    # logout is idempotent and public: again, unknown, absent, another kind of token
    for extra in (headers, bearer("rps_unknown"), {}, ADMIN_H):
        assert (await client.post("/v1/auth/logout", headers=extra)).status_code == 204


async def test_exchange_errors(client: Any) -> None:
    assert (await client.post("/v1/auth/token", json={})).status_code == 400
    assert (await client.post("/v1/auth/token", json={"token": ""})).status_code == 400
    for bogus in ("rpl_unknown", "rpt_not_a_login_token", "hello"):
        response = await client.post("/v1/auth/token", json={"token": bogus})
        assert response.status_code == 401, bogus
    seated = await seat(client, "once@example.com")
    await exchange(client, seated["login_token"])
    again = await client.post("/v1/auth/token", json={"token": seated["login_token"]})
    assert again.status_code == 401 and "already used" in (await again.get_json())["detail"]


async def test_seat_existing_account_adds_no_credential(client: Any) -> None:
    first = await seat(client, "dup@example.com")
    second = await seat(client, "DUP@example.com")
    assert second["login_token"] is None and second["user"] == first["user"]
    assert second["org_id"] == first["org_id"]


async def test_seat_needs_the_operator(client: Any) -> None:
    body = {"email": "z@example.com"}
    assert (await client.post("/v1/auth/seat", json=body)).status_code == 401
    owner = await mint(client, subject="o", role="owner")
    refused = await client.post("/v1/auth/seat", json=body, headers=bearer(owner["token"]))
    assert refused.status_code == 403
    assert (await refused.get_json())["code"] == "operator_token_required"
    bad = await client.post("/v1/auth/seat", json={"email": "nope"}, headers=ADMIN_H)
    assert bad.status_code == 400


async def _owner_session(client: Any, email: str = "owner@example.com") -> dict[str, str]:
    seated = await seat(client, email)
    return bearer((await exchange(client, seated["login_token"]))["session_token"])


async def test_orgs_create_and_list(client: Any) -> None:
    owner = await _owner_session(client)
    org = await ok_json(
        await client.post("/v1/orgs", json={"name": "Acme Robotics"}, headers=owner), 201
    )
    assert org["id"].startswith("org_") and org["kind"] == "team"
    assert (org["name"], org["slug"]) == ("Acme Robotics", "acme-robotics")
    taken = await client.post(
        "/v1/orgs", json={"name": "Other", "slug": "acme-robotics"}, headers=owner
    )
    assert taken.status_code == 409
    memberships = await ok_json(await client.get("/v1/orgs", headers=owner), 200)
    assert [(m["org"]["kind"], m["role"]) for m in memberships] == [
        ("personal", "owner"),
        ("team", "owner"),
    ]
    assert memberships[1]["org"] == org
    # an admin token or an access token is not a user session
    assert (await client.post("/v1/orgs", json={"name": "X"}, headers=ADMIN_H)).status_code == 403
    assert (await client.get("/v1/orgs", headers=ADMIN_H)).status_code == 403
    assert (await client.get("/v1/orgs")).status_code == 401
    assert (await client.post("/v1/orgs", json={}, headers=owner)).status_code == 400


async def test_members_flow_and_role_rules(client: Any) -> None:
    owner = await _owner_session(client)
    org = await ok_json(await client.post("/v1/orgs", json={"name": "Acme"}, headers=owner), 201)
    members = f"/v1/orgs/{org['id']}/members"

    added = await ok_json(
        await client.post(
            members, json={"email": "adm@example.com", "role": "admin"}, headers=owner
        ),
        201,
    )
    assert added["role"] == "admin" and added["login_token"].startswith("rpl_")
    admin_session = bearer((await exchange(client, added["login_token"]))["session_token"])

    # the org admin adds a member; may not grant owner/admin (403)
    member = await ok_json(
        await client.post(members, json={"email": "mia@example.com"}, headers=admin_session), 201
    )
    assert member["role"] == "member"
    for role in ("owner", "admin"):
        refused = await client.post(
            members, json={"email": "x@example.com", "role": role}, headers=admin_session
        )
        assert refused.status_code == 403
        assert (await refused.get_json())["code"] == "insufficient_role"
    # an existing account is added without a credential
    existing = await ok_json(
        await client.post(
            members, json={"email": "owner@example.com", "role": "owner"}, headers=owner
        ),
        201,
    )
    assert existing["login_token"] is None

    listed = await ok_json(await client.get(members, headers=admin_session), 200)
    assert [(m["email"], m["role"]) for m in listed] == [
        ("owner@example.com", "owner"),
        ("adm@example.com", "admin"),
        ("mia@example.com", "member"),
    ]
    assert set(listed[0]) == {"user_id", "name", "email", "role", "joined_at"}

    # a member cannot manage members
    member_session = bearer((await exchange(client, member["login_token"]))["session_token"])
    assert (await client.get(members, headers=member_session)).status_code == 403
    assert (await client.get("/v1/jobs", headers=member_session)).status_code == 200

    # removing: admin removes the member (204, and its session stops working)
    mia = member["user"]["id"]
    assert (await client.delete(f"{members}/{mia}", headers=admin_session)).status_code == 204
    assert (await client.get("/v1/jobs", headers=member_session)).status_code == 401
    assert (await client.delete(f"{members}/{mia}", headers=admin_session)).status_code == 404
    # the org admin may not remove the owner; the owner may not remove the last owner
    owner_id = listed[0]["user_id"]
    assert (await client.delete(f"{members}/{owner_id}", headers=admin_session)).status_code == 403
    last = await client.delete(f"{members}/{owner_id}", headers=owner)
    assert last.status_code == 409 and (await last.get_json())["code"] == "last_owner"
    # the superuser may manage any org
    assert (await client.get(members, headers=ADMIN_H)).status_code == 200
    assert (await client.get("/v1/orgs/org_nope/members", headers=ADMIN_H)).status_code == 404


async def test_members_of_another_org_are_404(client: Any) -> None:
    owner_a = await _owner_session(client, "a@example.com")
    owner_b = await _owner_session(client, "b@example.com")
    org_a = await ok_json(await client.post("/v1/orgs", json={"name": "A"}, headers=owner_a), 201)
    foreign = await client.get(f"/v1/orgs/{org_a['id']}/members", headers=owner_b)
    unknown = await client.get("/v1/orgs/org_nope/members", headers=owner_b)
    assert foreign.status_code == unknown.status_code == 404
    assert (await foreign.get_json())["detail"] == (await unknown.get_json())["detail"]


async def test_access_token_with_a_role_manages_its_own_org(client: Any) -> None:
    owner = await _owner_session(client)
    org = await ok_json(await client.post("/v1/orgs", json={"name": "T"}, headers=owner), 201)
    ops = await mint(client, subject="ops", org_id=org["id"], role="admin")
    members = f"/v1/orgs/{org['id']}/members"
    added = await client.post(
        members, json={"email": "n@example.com"}, headers=bearer(ops["token"])
    )
    assert added.status_code == 201
    other = await client.get("/v1/orgs/org_default/members", headers=bearer(ops["token"]))
    assert other.status_code == 404


@pytest.fixture
async def memory_app(make_settings: Callable[..., Settings]) -> AsyncIterator[QuartTrio]:
    application = create_app(make_settings(database_url="memory", auth="required"))
    async with application.test_app():
        yield application


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/auth/token"),
        ("POST", "/v1/auth/logout"),
        ("POST", "/v1/auth/seat"),
        ("POST", "/v1/orgs"),
        ("GET", "/v1/orgs"),
        ("GET", "/v1/orgs/org_default/members"),
        ("POST", "/v1/orgs/org_default/members"),
        ("DELETE", "/v1/orgs/org_default/members/usr_x"),
    ],
)
@pytest.mark.parametrize("as_admin", [False, True])
async def test_identity_routes_404_without_a_database(
    memory_app: QuartTrio, method: str, path: str, as_admin: bool
) -> None:
    headers = ADMIN_H if as_admin else {}
    response = await memory_app.test_client().open(
        path, method=method, headers=headers, json={"token": "x", "email": "a@b.c", "name": "n"}
    )
    assert response.status_code == 404
    assert (await response.get_json())["code"] == "identity_inactive"


async def test_memory_mode_keeps_tokens_and_empty_audit(memory_app: QuartTrio) -> None:
    client = memory_app.test_client()
    token = await mint(client, subject="ci", role="member")
    headers = bearer(token["token"])
    assert (
        await client.post("/v1/jobs", json={"stack": "shell"}, headers=headers)
    ).status_code == 202
    assert await ok_json(await client.get("/v1/admin/audit", headers=ADMIN_H), 200) == []
    session = await client.get("/v1/jobs", headers=bearer("rps_whatever"))
    assert session.status_code == 401
