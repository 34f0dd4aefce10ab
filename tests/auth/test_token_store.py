"""Access tokens over every store backend: hashed at rest, constant-time verified, revocable."""

from __future__ import annotations

import pytest

from runplane.auth import tokens
from runplane.auth.principal import InvalidCredential
from runplane.ids import hash_secret
from runplane.persistence import Store


async def test_mint_verify_revoke(store: Store) -> None:
    view, secret = await tokens.mint_token(
        store, subject="ci", kind="service", org_id="org_acme", name="CI", role="member"
    )
    assert view.id.startswith("tok_") and secret.startswith("rpt_") and len(secret) == 47
    assert secret not in repr(tokens.MintResult.of(view, secret))
    principal = await tokens.verify_token(store, secret)
    assert (principal.subject, principal.org_id, principal.read_org) == (
        "ci",
        "org_acme",
        "org_acme",
    )
    assert principal.role == "member" and principal.has_scope("runs:submit")
    assert not principal.has_scope("runs:manage") and not principal.superuser
    assert principal.credential_id == view.id

    assert await tokens.revoke_token(store, view.id)
    assert await tokens.revoke_token(store, view.id)  # idempotent
    assert not await tokens.revoke_token(store, "tok_unknown")
    with pytest.raises(InvalidCredential, match=f"{view.id} was revoked"):
        await tokens.verify_token(store, secret)
    listed = await tokens.list_tokens(store)
    assert [(t.id, t.revoked) for t in listed] == [(view.id, True)]


async def test_only_the_hash_is_stored(store: Store) -> None:
    _, secret = await tokens.mint_token(store, subject="u")
    rows = await store.fetchall("SELECT * FROM access_tokens")
    assert rows[0]["secret_hash"] == hash_secret(secret)
    assert all(secret not in str(value) for value in rows[0].values())


async def test_unknown_and_malformed(store: Store) -> None:
    await tokens.mint_token(store, subject="u")
    for bogus in ("rpt_" + "x" * 43, "rpt_", "rpt_short"):
        with pytest.raises(InvalidCredential, match="unknown access token"):
            await tokens.verify_token(store, bogus)


async def test_list_filters_by_org_newest_first(store: Store) -> None:
    a1, _ = await tokens.mint_token(store, subject="a1", org_id="org_a")
    b1, _ = await tokens.mint_token(store, subject="b1", org_id="org_b")
    a2, _ = await tokens.mint_token(store, subject="a2", org_id="org_a")
    assert [t.id for t in await tokens.list_tokens(store, "org_a")] == [a2.id, a1.id]
    assert [t.id for t in await tokens.list_tokens(store)] == [a2.id, b1.id, a1.id]
    assert (await tokens.get_token(store, b1.id)) == b1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"subject": " "}, "subject"),
        ({"subject": "x", "org_id": "acme"}, "org_id"),
        ({"subject": "x", "kind": "robot"}, "kind"),
        ({"subject": "x", "role": "owner", "scopes": ["*"]}, "not both"),
    ],
)
async def test_mint_refuses(store: Store, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        await tokens.mint_token(store, **kwargs)  # type: ignore[arg-type]
