"""Helpers for the auth tests: bearer headers, minting, seating, and a two-org "world"."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from runplane.auth import identity
from runplane.persistence import Store, Tx

ADMIN = "admin-token-for-tests-0123456789"  # the same value as tests/http/conftest.py

_seq = itertools.count(1)


async def issue_login_token(store: Store, user_id: str, org_id: str) -> str:
    """A new login token for a member of ``org_id`` (what an operator's tooling would mint)."""
    now = identity._now()

    def run(tx: Tx) -> str:
        member = tx.fetchone(
            "SELECT role FROM org_members WHERE org_id = ? AND user_id = ?", (org_id, user_id)
        )
        assert member is not None, f"{user_id} is not a member of {org_id}"
        return identity._insert_login_token(tx, user_id, org_id, now)

    return await store.transaction(run)


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


ADMIN_H = bearer(ADMIN)


def unique(prefix: str) -> str:
    return f"{prefix}{next(_seq)}"


def store_of(app: Any) -> Store:
    return app.extensions["runplane"].store  # type: ignore[no-any-return]


async def ok_json(response: Any, status: int) -> Any:
    body = await response.get_json()
    assert response.status_code == status, body
    return body


async def mint(client: Any, **body: Any) -> dict[str, Any]:
    """POST /v1/auth/tokens as the admin; the MintResult."""
    result: dict[str, Any] = await ok_json(
        await client.post("/v1/auth/tokens", json=body, headers=ADMIN_H), 201
    )
    return result


async def seat(client: Any, email: str, name: str = "") -> dict[str, Any]:
    body = {"email": email, **({"name": name} if name else {})}
    result: dict[str, Any] = await ok_json(
        await client.post("/v1/auth/seat", json=body, headers=ADMIN_H), 201
    )
    return result


async def exchange(client: Any, login_token: str) -> dict[str, Any]:
    result: dict[str, Any] = await ok_json(
        await client.post("/v1/auth/token", json={"token": login_token}), 200
    )
    return result


async def login(client: Any, store: Store, user_id: str, org_id: str) -> str:
    """A session token for a member of ``org_id`` (login token issued in Python)."""
    login_token = await issue_login_token(store, user_id, org_id)
    return str((await exchange(client, login_token))["session_token"])


@dataclass
class World:
    """Two team orgs, one owner user, a job in org A, and a credential per persona.

    Personas (the route matrix's columns): anonymous, a token of the wrong org (an owner
    token of org B), a token missing scopes (service, org A, no scopes), viewer, member,
    org admin (role tokens of org A), the admin token, and the owner's login session.
    """

    org_a: str
    org_b: str
    owner_id: str
    owner_session: str
    job_a: str
    secrets: dict[str, str] = field(default_factory=dict)
    #: a pipeline run of org A (made by the route matrix's fixture)
    pipeline_a: str = ""
    #: a session of org A (made by the route matrix's fixture)
    session_a: str = ""
    array_a: str = ""
    #: a webhook endpoint of org A (made by the route matrix's fixture)
    webhook_a: str = ""

    def headers(self, persona: str) -> dict[str, str]:
        if persona == "anonymous":
            return {}
        if persona == "admin":
            return dict(ADMIN_H)
        if persona == "session":
            return bearer(self.owner_session)
        return bearer(self.secrets[persona])


PERSONAS = (
    "anonymous",
    "wrong_org",
    "no_scope",
    "viewer",
    "member",
    "org_admin",
    "admin",
    "session",
)

#: What each persona holds, as the spec's role bundles say (tests derive expectations).
PERSONA_SCOPES: dict[str, frozenset[str]] = {
    "anonymous": frozenset(),
    "wrong_org": frozenset({"*"}),
    "no_scope": frozenset(),
    "viewer": frozenset(),
    "member": frozenset({"runs:submit", "runs:cancel", "runs:priority", "runs:share", "git:read"}),
    "org_admin": frozenset({"*"}),
    "admin": frozenset({"*"}),
    "session": frozenset({"*"}),
}
MANAGERS = frozenset({"org_admin", "admin", "session"})  # of org A (wrong_org: of org B)


async def build_world(client: Any, store: Store) -> World:
    owner = await seat(client, unique("owner") + "@example.com", "Owner")
    personal = await exchange(client, owner["login_token"])
    s0 = bearer(personal["session_token"])
    org_a = await ok_json(await client.post("/v1/orgs", json={"name": "Acme"}, headers=s0), 201)
    org_b = await ok_json(await client.post("/v1/orgs", json={"name": "Beta"}, headers=s0), 201)
    session = await login(client, store, owner["user"]["id"], org_a["id"])
    secrets = {
        "wrong_org": (await mint(client, subject="b-owner", org_id=org_b["id"], role="owner"))[
            "token"
        ],
        "no_scope": (
            await mint(client, subject="reader", kind="service", org_id=org_a["id"], scopes=[])
        )["token"],
        "viewer": (await mint(client, subject="vera", org_id=org_a["id"], role="viewer"))["token"],
        "member": (await mint(client, subject="mo", org_id=org_a["id"], role="member"))["token"],
        "org_admin": (await mint(client, subject="ada", org_id=org_a["id"], role="admin"))["token"],
    }
    job = await ok_json(
        await client.post(
            "/v1/jobs",
            json={"stack": "shell", "command": ["true"]},
            headers=bearer(secrets["member"]),
        ),
        202,
    )
    assert job["org_id"] == org_a["id"]
    # terminal, so that its event stream ends after the replay
    await ok_json(await client.post(f"/v1/jobs/{job['job_id']}/cancel", headers=ADMIN_H), 200)
    return World(
        org_a=org_a["id"],
        org_b=org_b["id"],
        owner_id=owner["user"]["id"],
        owner_session=session,
        job_a=job["job_id"],
        secrets=secrets,
    )
