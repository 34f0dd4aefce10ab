"""Users, orgs, memberships, login tokens and sessions over every store backend."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runplane.auth import identity
from runplane.auth.principal import InvalidCredential
from runplane.ids import hash_secret
from runplane.persistence import Store
from runplane.problems import Problem
from runplane.runtime import clock
from tests.auth.support import issue_login_token

SU = identity.SUPERUSER


@pytest.fixture
def frozen_wall() -> Iterator[list[float]]:
    now = [1_800_000_000.0]
    clock.set_wall_source(lambda: now[0])
    try:
        yield now
    finally:
        clock.set_wall_source(None)


async def test_default_org_exists(store: Store) -> None:
    org = await identity.get_org(store, "org_default")
    assert org is not None and org.kind == "team" and org.slug == "default"


async def test_seat_then_exchange_once(store: Store) -> None:
    seated = await identity.seat(store, name="Ann", email=" Ann@Example.COM ")
    assert seated.created and seated.login_token and seated.login_token.startswith("rpl_")
    assert seated.user.email == "ann@example.com" and seated.user.id.startswith("usr_")
    org = await identity.get_org(store, seated.org_id)
    assert org is not None and org.kind == "personal"
    assert await identity.member_role(store, seated.org_id, seated.user.id) == "owner"

    granted = await identity.exchange(store, seated.login_token)
    assert granted.session_token.startswith("rps_") and granted.role == "owner"
    assert granted.session_token not in repr(granted)
    result = granted.result()
    assert result["scopes"] == ["*"] and result["expires_at"].endswith("Z")
    with pytest.raises(InvalidCredential, match="already used"):
        await identity.exchange(store, seated.login_token)

    principal = await identity.verify_session(store, granted.session_token)
    assert (principal.kind, principal.subject, principal.org_id) == (
        "user",
        seated.user.id,
        seated.org_id,
    )
    assert principal.credential == "session" and principal.role == "owner"

    again = await identity.seat(store, name="Other", email="ann@example.com")
    assert not again.created and again.login_token is None and again.user == seated.user
    assert again.org_id == seated.org_id


async def test_secrets_are_hashes_at_rest(store: Store) -> None:
    seated = await identity.seat(store, name=None, email="b@example.com")
    assert seated.login_token is not None
    granted = await identity.exchange(store, seated.login_token)
    login_rows = await store.fetchall("SELECT * FROM login_tokens")
    session_rows = await store.fetchall("SELECT * FROM login_sessions")
    assert login_rows[0]["secret_hash"] == hash_secret(seated.login_token)
    assert session_rows[0]["secret_hash"] == hash_secret(granted.session_token)
    for row in login_rows + session_rows:
        text = str(row)
        assert seated.login_token not in text and granted.session_token not in text


async def test_expiry(store: Store, frozen_wall: list[float]) -> None:
    seated = await identity.seat(store, name=None, email="c@example.com")
    assert seated.login_token is not None
    frozen_wall[0] += identity.LOGIN_TOKEN_TTL_MS / 1000 + 1
    with pytest.raises(InvalidCredential, match="expired"):
        await identity.exchange(store, seated.login_token)

    fresh = await issue_login_token(store, seated.user.id, seated.org_id)
    granted = await identity.exchange(store, fresh)
    await identity.verify_session(store, granted.session_token)
    frozen_wall[0] += identity.SESSION_TTL_MS / 1000 + 1
    with pytest.raises(InvalidCredential, match="expired"):
        await identity.verify_session(store, granted.session_token)


async def test_logout_revokes(store: Store) -> None:
    seated = await identity.seat(store, name=None, email="d@example.com")
    assert seated.login_token is not None
    granted = await identity.exchange(store, seated.login_token)
    assert await identity.logout(store, granted.session_token) == granted.session_id
    assert await identity.logout(store, granted.session_token) is None
    assert await identity.logout(store, "rps_unknown") is None
    with pytest.raises(InvalidCredential, match="ended"):
        await identity.verify_session(store, granted.session_token)


async def _team(store: Store) -> tuple[str, str]:
    """A team org and its owner's user id."""
    owner = await identity.seat(store, name="Owner", email="owner@example.com")
    org = await identity.create_org(store, user_id=owner.user.id, name="Acme", slug=None)
    assert (org.kind, org.slug) == ("team", "acme")
    return org.id, owner.user.id


async def test_create_org_slug_rules(store: Store) -> None:
    _, owner = await _team(store)
    with pytest.raises(Problem) as taken:
        await identity.create_org(store, user_id=owner, name="Acme", slug=None)
    assert taken.value.status == 409
    with pytest.raises(Problem) as bad:
        await identity.create_org(store, user_id=owner, name="X", slug="-bad-")
    assert bad.value.status == 400
    memberships = await identity.memberships(store, owner)
    assert [(m["org"]["kind"], m["role"]) for m in memberships] == [
        ("personal", "owner"),
        ("team", "owner"),
    ]


async def test_member_role_rules(store: Store) -> None:
    org_id, owner = await _team(store)
    admin = await identity.add_member(
        store, org_id, name=None, email="adm@example.com", role="admin", granter="owner"
    )
    assert admin.created and admin.login_token is not None
    # an admin may add members and viewers ...
    member = await identity.add_member(
        store, org_id, name="Mia", email="mia@example.com", role="member", granter="admin"
    )
    assert member.created and member.role == "member"
    # ... but not grant owner/admin, nor touch an owner/admin
    for role in ("owner", "admin"):
        with pytest.raises(Problem) as denied:
            await identity.add_member(
                store, org_id, name=None, email="mia@example.com", role=role, granter="admin"
            )
        assert denied.value.status == 403
    with pytest.raises(Problem) as denied:
        await identity.remove_member(store, org_id, owner, granter="admin")
    assert denied.value.status == 403
    with pytest.raises(Problem) as denied:
        await identity.remove_member(store, org_id, admin.user.id, granter="admin")
    assert denied.value.status == 403
    # re-adding an existing account: no credential, role unchanged or changed
    same = await identity.add_member(
        store, org_id, name=None, email="mia@example.com", role="member", granter="admin"
    )
    assert not same.created and not same.changed and same.login_token is None
    changed = await identity.add_member(
        store, org_id, name=None, email="mia@example.com", role="viewer", granter="owner"
    )
    assert changed.changed and changed.role == "viewer"
    members = await identity.list_members(store, org_id)
    assert [(m["email"], m["role"]) for m in members] == [
        ("owner@example.com", "owner"),
        ("adm@example.com", "admin"),
        ("mia@example.com", "viewer"),
    ]
    assert await identity.remove_member(store, org_id, member.user.id, granter="admin") == "viewer"
    with pytest.raises(Problem) as gone:
        await identity.remove_member(store, org_id, member.user.id, granter="owner")
    assert gone.value.status == 404


async def test_last_owner_cannot_leave_or_be_demoted(store: Store) -> None:
    org_id, owner = await _team(store)
    with pytest.raises(Problem) as last:
        await identity.remove_member(store, org_id, owner, granter=SU)
    assert (last.value.status, last.value.code) == (409, "last_owner")
    with pytest.raises(Problem) as demote:
        await identity.add_member(
            store, org_id, name=None, email="owner@example.com", role="admin", granter=SU
        )
    assert demote.value.status == 409
    second = await identity.add_member(
        store, org_id, name=None, email="two@example.com", role="owner", granter="owner"
    )
    assert await identity.remove_member(store, org_id, owner, granter="owner") == "owner"
    with pytest.raises(Problem):
        await identity.remove_member(store, org_id, second.user.id, granter="owner")


async def test_membership_is_read_live(store: Store) -> None:
    org_id, _ = await _team(store)
    added = await identity.add_member(
        store, org_id, name=None, email="liv@example.com", role="member", granter=SU
    )
    assert added.login_token is not None
    granted = await identity.exchange(store, added.login_token)
    assert granted.org_id == org_id and granted.role == "member"
    principal = await identity.verify_session(store, granted.session_token)
    assert principal.role == "member" and principal.has_scope("runs:submit")
    await identity.add_member(
        store, org_id, name=None, email="liv@example.com", role="viewer", granter=SU
    )
    principal = await identity.verify_session(store, granted.session_token)
    assert principal.role == "viewer" and not principal.has_scope("runs:submit")
    # another org of the user (its personal org) by explicit choice
    personal = [
        m["org"]["id"]
        for m in await identity.memberships(store, added.user.id)
        if m["org"]["kind"] == "personal"
    ]
    mine = await identity.verify_session(store, granted.session_token, org_id=personal[0])
    assert (mine.org_id, mine.role) == (personal[0], "owner")
    with pytest.raises(Problem) as stranger:
        await identity.verify_session(store, granted.session_token, org_id="org_default")
    assert stranger.value.code == "not_a_member"
    await identity.remove_member(store, org_id, added.user.id, granter=SU)
    with pytest.raises(InvalidCredential, match="no longer in its org"):
        await identity.verify_session(store, granted.session_token)


async def test_exchange_refuses_a_user_who_left(store: Store) -> None:
    org_id, _ = await _team(store)
    added = await identity.add_member(
        store, org_id, name=None, email="gone@example.com", role="member", granter=SU
    )
    assert added.login_token is not None
    await identity.remove_member(store, org_id, added.user.id, granter=SU)
    with pytest.raises(InvalidCredential, match="left"):
        await identity.exchange(store, added.login_token)


@pytest.mark.parametrize("email", ["", "no-at-sign", "a@b@c", "sp ace@x.io", "x" * 250 + "@x.io"])
async def test_bad_email(store: Store, email: str) -> None:
    with pytest.raises(Problem) as bad:
        await identity.seat(store, name=None, email=email)
    assert bad.value.status == 400 and bad.value.errors[0].key == "email"
