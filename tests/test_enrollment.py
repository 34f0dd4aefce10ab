"""Join tokens and node credentials over the store (SQLite; the store suite covers PostgreSQL)."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from runplane.ids import hash_secret
from runplane.nodes import enrollment
from runplane.nodes.enrollment import EnrollmentRefused, NodeIdentity
from runplane.persistence import Store, open_store
from runplane.settings import load_settings

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    s = open_store(None, tmp_path / "data")
    async with s:
        yield s


async def all_text(store: Store, table: str) -> str:
    return json.dumps(await store.fetchall(f"SELECT * FROM {table}"))


async def test_mint_returns_view_and_secret_and_stores_only_the_hash(store: Store) -> None:
    view, secret = await enrollment.mint_join_token(
        store, tier="partner", org_id="org_acme", label="rack 4"
    )
    assert re.match(r"^jt_[0-9a-z]{26}$", view.id)
    assert re.match(r"^rpj_[A-Za-z0-9_-]{43}$", secret)
    assert (view.tier, view.org_id, view.label, view.revoked) == (
        "partner",
        "org_acme",
        "rack 4",
        False,
    )
    assert ISO_MS.match(view.created_at)
    stored = await all_text(store, "join_tokens")
    assert secret not in stored
    assert secret[len("rpj_") :] not in stored
    assert hash_secret(secret) in stored


async def test_mint_defaults(store: Store) -> None:
    view, _ = await enrollment.mint_join_token(store)
    assert (view.tier, view.org_id, view.label) == ("community", "org_default", "")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"tier": "gold"}, "tier"),
        ({"org_id": "acme"}, "org_id"),
        ({"org_id": "org_"}, "org_id"),
        ({"label": "x" * 201}, "at most 200"),
    ],
)
async def test_mint_refuses_bad_arguments(store: Store, kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        await enrollment.mint_join_token(store, **kwargs)  # type: ignore[arg-type]
    assert await enrollment.list_join_tokens(store) == []


async def test_list_is_newest_first_secret_free_and_filters_by_org(store: Store) -> None:
    minted = []
    for i, org in enumerate(["org_a", "org_b", "org_a"]):
        view, secret = await enrollment.mint_join_token(store, org_id=org, label=f"t{i}")
        minted.append((view, secret))
    listed = await enrollment.list_join_tokens(store)
    assert [v.id for v in listed] == [v.id for v, _ in reversed(minted)]
    dumped = json.dumps([v.model_dump() for v in listed])
    for _, secret in minted:
        assert secret not in dumped
    assert set(listed[0].model_dump()) == {"id", "tier", "org_id", "label", "created_at", "revoked"}
    assert [v.label for v in await enrollment.list_join_tokens(store, "org_a")] == ["t2", "t0"]
    assert await enrollment.list_join_tokens(store, "org_none") == []
    assert await enrollment.get_join_token(store, minted[1][0].id) == minted[1][0]
    assert await enrollment.get_join_token(store, "jt_unknown") is None


async def test_secret_is_not_in_reprs(store: Store) -> None:
    view, secret = await enrollment.mint_join_token(store)
    mint = enrollment.JoinTokenMint.of(view, secret)
    assert mint.token == secret
    assert "shown only once" in mint.note
    assert secret not in repr(mint)
    node = await enrollment.enroll_node(store, secret)
    assert node.credential_secret not in repr(node)


async def test_full_lifecycle(store: Store) -> None:
    view, secret = await enrollment.mint_join_token(store, tier="trusted", org_id="org_lab")
    node = await enrollment.enroll_node(store, secret)
    assert re.match(r"^node_[0-9a-z]{26}$", node.node_id)
    assert re.match(r"^rpn_[A-Za-z0-9_-]{43}$", node.credential_secret)
    assert (node.tier, node.org_id) == ("trusted", "org_lab")
    assert await enrollment.verify_node_credential(store, node.credential_secret) == NodeIdentity(
        node.node_id, "trusted", "org_lab"
    )
    stored = await all_text(store, "node_credentials")
    assert node.credential_secret not in stored
    assert hash_secret(node.credential_secret) in stored
    row = await store.fetchone(
        "SELECT join_token_id FROM node_credentials WHERE node_id = ?", (node.node_id,)
    )
    assert row == {"join_token_id": view.id}
    used = await store.fetchone("SELECT last_used_at FROM join_tokens WHERE id = ?", (view.id,))
    assert used is not None and used["last_used_at"] is not None

    assert await enrollment.revoke_join_token(store, view.id) is True
    [listed] = await enrollment.list_join_tokens(store)
    assert listed.revoked is True

    with pytest.raises(EnrollmentRefused) as refused:
        await enrollment.enroll_node(store, secret)
    assert refused.value.code == "revoked_join_token"
    assert view.id in refused.value.reason
    assert "new join token" in refused.value.reason
    assert secret not in str(refused.value)
    # chosen: revoking a join token stops new enrollments, not nodes already enrolled
    assert await enrollment.verify_node_credential(store, node.credential_secret) is not None
    count = await store.fetchone("SELECT count(*) AS n FROM node_credentials")
    assert count == {"n": 1}  # the refused enrollment left nothing behind


async def test_a_fleet_token_enrolls_many_nodes(store: Store) -> None:
    _, secret = await enrollment.mint_join_token(store)
    nodes: list[enrollment.EnrolledNode] = []

    async def enroll() -> None:
        nodes.append(await enrollment.enroll_node(store, secret))

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(enroll)
    assert len({n.node_id for n in nodes}) == 20
    assert len({n.credential_secret for n in nodes}) == 20
    for n in nodes:
        identity = await enrollment.verify_node_credential(store, n.credential_secret)
        assert identity is not None and identity.node_id == n.node_id


async def test_revoke_is_idempotent_and_unknown_is_false(store: Store) -> None:
    view, _ = await enrollment.mint_join_token(store)
    assert await enrollment.revoke_join_token(store, view.id) is True
    await store.execute("UPDATE join_tokens SET revoked_at = 5 WHERE id = ?", (view.id,))
    assert await enrollment.revoke_join_token(store, view.id) is True
    again = await store.fetchone("SELECT revoked_at FROM join_tokens WHERE id = ?", (view.id,))
    assert again == {"revoked_at": 5}  # the first revocation time is kept
    assert await enrollment.revoke_join_token(store, "jt_nope") is False


@pytest.mark.parametrize(
    ("presented", "code"),
    [
        ("rpj_" + "A" * 43, "unknown_join_token"),
        ("rpn_" + "A" * 43, "malformed_join_token"),
        ("", "malformed_join_token"),
        ("not a token", "malformed_join_token"),
    ],
)
async def test_unknown_or_malformed_tokens_are_refused(
    store: Store, presented: str, code: str
) -> None:
    await enrollment.mint_join_token(store)
    with pytest.raises(EnrollmentRefused) as refused:
        await enrollment.enroll_node(store, presented)
    assert refused.value.code == code
    assert "POST /v1/nodes/join-tokens" in refused.value.reason
    if presented:
        assert presented not in refused.value.reason


async def test_verify_refuses_what_is_not_a_live_credential(store: Store) -> None:
    _, join_secret = await enrollment.mint_join_token(store)
    node = await enrollment.enroll_node(store, join_secret)
    for bad in [
        "",
        join_secret,  # a join token is not a node credential
        node.credential_secret + "x",
        node.credential_secret[:-1],
        "rpn_" + "A" * 43,
        hash_secret(node.credential_secret),  # the stored hash is not the secret
    ]:
        assert await enrollment.verify_node_credential(store, bad) is None
    assert await enrollment.verify_node_credential(store, None) is None  # type: ignore[arg-type]


async def test_open_enroll(store: Store) -> None:
    node = await enrollment.open_enroll(store)
    assert (node.tier, node.org_id) == ("community", "org_default")
    assert node.node_id.startswith("node_") and node.credential_secret.startswith("rpn_")
    row = await store.fetchone(
        "SELECT join_token_id FROM node_credentials WHERE node_id = ?", (node.node_id,)
    )
    assert row == {"join_token_id": None}
    identity = await enrollment.verify_node_credential(store, node.credential_secret)
    assert identity == NodeIdentity(node.node_id, "community", "org_default")


async def test_revoke_and_rotate_node_credentials(store: Store) -> None:
    _, join_secret = await enrollment.mint_join_token(store)
    a = await enrollment.enroll_node(store, join_secret)
    b = await enrollment.enroll_node(store, join_secret)

    fresh = await enrollment.rotate_node_credential(store, a.node_id)
    assert fresh is not None and fresh.startswith("rpn_") and fresh != a.credential_secret
    assert await enrollment.verify_node_credential(store, a.credential_secret) is None
    identity = await enrollment.verify_node_credential(store, fresh)
    assert identity is not None and identity.node_id == a.node_id

    assert await enrollment.revoke_node_credential(store, b.node_id) is True
    assert await enrollment.revoke_node_credential(store, b.node_id) is True
    assert await enrollment.verify_node_credential(store, b.credential_secret) is None
    assert await enrollment.rotate_node_credential(store, b.node_id) is None  # re-enroll instead
    assert await enrollment.revoke_node_credential(store, "node_nope") is False
    assert await enrollment.rotate_node_credential(store, "node_nope") is None


async def test_revoke_nodes_enrolled_by_a_leaked_token(store: Store) -> None:
    leaked, leaked_secret = await enrollment.mint_join_token(store)
    _, other_secret = await enrollment.mint_join_token(store)
    rogue = [await enrollment.enroll_node(store, leaked_secret) for _ in range(3)]
    keep = await enrollment.enroll_node(store, other_secret)
    opened = await enrollment.open_enroll(store)

    assert await enrollment.revoke_join_token(store, leaked.id)
    assert await enrollment.revoke_nodes_enrolled_by(store, leaked.id) == 3
    assert await enrollment.revoke_nodes_enrolled_by(store, leaked.id) == 0
    for node in rogue:
        assert await enrollment.verify_node_credential(store, node.credential_secret) is None
    assert await enrollment.verify_node_credential(store, keep.credential_secret) is not None
    assert await enrollment.verify_node_credential(store, opened.credential_secret) is not None


async def test_tokens_and_credentials_survive_a_restart(tmp_path: Path) -> None:
    first = open_store(None, tmp_path / "data")
    async with first:
        view, join_secret = await enrollment.mint_join_token(store=first, label="persist")
        node = await enrollment.enroll_node(first, join_secret)
    second = open_store(None, tmp_path / "data")
    async with second:
        assert [v.id for v in await enrollment.list_join_tokens(second)] == [view.id]
        assert await enrollment.verify_node_credential(second, node.credential_secret)
        assert await enrollment.enroll_node(second, join_secret)


async def test_secrets_never_reach_the_logs(store: Store, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    view, join_secret = await enrollment.mint_join_token(store)
    node = await enrollment.enroll_node(store, join_secret)
    await enrollment.verify_node_credential(store, node.credential_secret)
    await enrollment.rotate_node_credential(store, node.node_id)
    await enrollment.revoke_join_token(store, view.id)
    with pytest.raises(EnrollmentRefused):
        await enrollment.enroll_node(store, join_secret)
    assert caplog.records, "enrollment events are logged"
    for record in caplog.records:
        text = json.dumps(vars(record), default=str)
        assert join_secret not in text
        assert node.credential_secret not in text
    messages = [r.getMessage() for r in caplog.records]
    assert "join token minted" in messages and "node enrolled" in messages


@pytest.mark.parametrize(
    ("given", "tier"),
    [
        (None, "community"),
        ("community", "community"),
        ("partner", "partner"),
        ("trusted", "trusted"),
        (" Trusted ", "trusted"),
        ("PARTNER", "partner"),
        ("gold", "community"),
        ("", "community"),
        (3, "community"),
        (True, "community"),
        (["trusted"], "community"),
    ],
)
def test_coerce_tier(given: object, tier: str) -> None:
    assert enrollment.coerce_tier(given) == tier


@pytest.mark.parametrize(
    ("env", "allowed"),
    [
        ({}, True),
        ({"RUNPLANE_AUTH": "shadow"}, True),
        ({"RUNPLANE_AUTH": "required"}, False),
        ({"RUNPLANE_DISABLE": "enrollment"}, False),
        ({"RUNPLANE_DISABLE": "streams"}, True),
    ],
)
def test_open_enrollment_allowed(env: dict[str, str], allowed: bool) -> None:
    assert enrollment.open_enrollment_allowed(load_settings(env)) is allowed


def test_iso_ms() -> None:
    assert enrollment.iso_ms(0) == "1970-01-01T00:00:00.000Z"
    assert enrollment.iso_ms(1_700_000_000_123) == "2023-11-14T22:13:20.123Z"
    assert enrollment.iso_ms(1_700_000_000_005) == "2023-11-14T22:13:20.005Z"
