"""Node enrollment: join tokens (``rpj_``) and node credentials (``rpn_``). See docs/enrollment.md.

- An operator mints a **join token** (``jt_`` id, ``rpj_`` secret) for a tier and an org.
  It is a *fleet* token: any number of machines may enroll with it until it is revoked.
- A machine enrolls once with the join token and receives its own **node credential**
  (``node_`` id, ``rpn_`` secret) that it presents on every later reconnect.
- Revoking a join token stops new enrollments only: nodes it already enrolled keep their
  credentials (:func:`revoke_nodes_enrolled_by` cuts them off too, for a leaked token).
- Secrets are stored only as hex SHA-256 (:func:`runplane.ids.hash_secret`), compared in
  constant time, returned once by the call that creates them, and never logged.

Async functions over a :class:`~runplane.persistence.Store` (tables of migration 0003).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from runplane.ids import (
    hash_secret,
    new_id,
    new_secret,
    secrets_equal,
    valid_org_id,
)
from runplane.persistence import Row, Store, Tx, now_ms
from runplane.persistence.revocable import newest_first, revoke
from runplane.settings import Settings
from runplane.timefmt import iso_ms

log = logging.getLogger("runplane.nodes.enrollment")

TIERS: tuple[str, ...] = ("community", "partner", "trusted")
DEFAULT_TIER = "community"
DEFAULT_ORG = "org_default"
LABEL_MAX = 200

JOIN_TOKEN_ID_PREFIX = "jt_"
JOIN_TOKEN_PREFIX = "rpj_"
NODE_ID_PREFIX = "node_"
NODE_CREDENTIAL_PREFIX = "rpn_"


MINT_NOTE = (
    "Store this join token now: it is shown only once and cannot be recovered (only its "
    "hash is kept). Enroll a machine with `runplane agent --server <URL> --join-token "
    "<token>`; revoke it with DELETE /v1/nodes/join-tokens/{id}."
)


class JoinTokenView(BaseModel):
    """A join token as listed: no secret (spec JoinTokenView)."""

    model_config = ConfigDict(frozen=True)

    id: str
    tier: str
    org_id: str
    label: str
    created_at: str  # ISO 8601 UTC with milliseconds and Z
    revoked: bool


class JoinTokenMint(BaseModel):
    """The answer to minting a join token: the only time the secret is shown (spec)."""

    model_config = ConfigDict(frozen=True)

    id: str
    token: str = Field(repr=False)
    tier: str
    note: str

    @classmethod
    def of(cls, view: JoinTokenView, token: str, *, extra_note: str = "") -> JoinTokenMint:
        note = f"{extra_note} {MINT_NOTE}" if extra_note else MINT_NOTE
        return cls(id=view.id, token=token, tier=view.tier, note=note)


@dataclass(frozen=True, slots=True)
class EnrolledNode:
    """A newly enrolled node. ``credential_secret`` (``rpn_...``) is returned only here."""

    node_id: str
    credential_secret: str = field(repr=False)
    tier: str
    org_id: str


@dataclass(frozen=True, slots=True)
class NodeIdentity:
    """Who a valid node credential belongs to."""

    node_id: str
    tier: str
    org_id: str


class EnrollmentRefused(Exception):
    """A join token that cannot enroll a node. ``reason`` says what to do about it.

    ``code``: ``malformed_join_token`` | ``unknown_join_token`` | ``revoked_join_token``.
    Neither ever contains the presented secret.
    """

    def __init__(self, code: str, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def coerce_tier(value: object) -> str:
    """The tier a mint request asked for; anything that is not a tier becomes ``community``
    (the spec: an invalid value defaults to community). Case and surrounding blanks are
    ignored (``" Trusted"`` is ``trusted``)."""
    if isinstance(value, str) and value.strip().lower() in TIERS:
        return value.strip().lower()
    return DEFAULT_TIER


def open_enrollment_allowed(settings: Settings) -> bool:
    """Whether an agent may enroll without a join token (:func:`open_enroll`).

    Only when auth is not ``required`` and the ``enrollment`` area is not disabled. In
    ``shadow`` mode it is allowed (shadow never denies); the caller logs that ``required``
    would refuse it.
    """
    return settings.auth != "required" and settings.area_enabled("enrollment")


def _view(row: Row) -> JoinTokenView:
    return JoinTokenView(
        id=row["id"],
        tier=row["tier"],
        org_id=row["org_id"],
        label=row["label"],
        created_at=iso_ms(int(row["created_at"])),
        revoked=row["revoked_at"] is not None,
    )


_VIEW_COLUMNS = "id, tier, org_id, label, created_at, revoked_at"


async def mint_join_token(
    store: Store, *, tier: str = DEFAULT_TIER, org_id: str = DEFAULT_ORG, label: str = ""
) -> tuple[JoinTokenView, str]:
    """Mint a join token; return its view and its secret (``rpj_...``, shown once).

    Raises ValueError for a tier not in :data:`TIERS` (use :func:`coerce_tier` for the
    lenient API behaviour), a malformed ``org_id`` or a label over :data:`LABEL_MAX` chars.
    """
    if tier not in TIERS:
        raise ValueError(f"tier {tier!r} is not one of {', '.join(TIERS)}")
    if not valid_org_id(org_id):
        raise ValueError(f"org_id {org_id!r} is not an org id (org_ + [a-z0-9_-], max 64)")
    if len(label) > LABEL_MAX:
        raise ValueError(f"label is {len(label)} characters; at most {LABEL_MAX} are accepted")
    token_id = new_id(JOIN_TOKEN_ID_PREFIX)
    secret = new_secret(JOIN_TOKEN_PREFIX)
    created = now_ms()
    await store.execute(
        "INSERT INTO join_tokens (id, secret_hash, tier, org_id, label, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (token_id, hash_secret(secret), tier, org_id, label, created),
    )
    log.info(
        "join token minted",
        extra={"join_token_id": token_id, "tier": tier, "org_id": org_id},
    )
    view = JoinTokenView(
        id=token_id,
        tier=tier,
        org_id=org_id,
        label=label,
        created_at=iso_ms(created),
        revoked=False,
    )
    return view, secret


async def list_join_tokens(store: Store, org_id: str | None = None) -> list[JoinTokenView]:
    """Join tokens, newest first (revoked ones included, flagged); only ``org_id``'s if given."""
    return [_view(row) for row in await newest_first(store, "join_tokens", _VIEW_COLUMNS, org_id)]


async def get_join_token(store: Store, token_id: str) -> JoinTokenView | None:
    row = await store.fetchone(f"SELECT {_VIEW_COLUMNS} FROM join_tokens WHERE id = ?", (token_id,))
    return None if row is None else _view(row)


async def revoke_join_token(store: Store, token_id: str) -> bool:
    """Revoke a join token: it enrolls no more nodes. False when the id is unknown.

    Idempotent: revoking a revoked token is True and keeps the first revocation time.
    Nodes already enrolled with it keep their credentials (see :func:`revoke_nodes_enrolled_by`).
    """
    known, changed = await revoke(store, "join_tokens", "id", token_id)
    if changed:
        log.info("join token revoked", extra={"join_token_id": token_id})
    return known


def _insert_credential(tx: Tx, node: EnrolledNode, join_token_id: str | None, created: int) -> None:
    tx.execute(
        "INSERT INTO node_credentials "
        "(node_id, secret_hash, join_token_id, tier, org_id, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (
            node.node_id,
            hash_secret(node.credential_secret),
            join_token_id,
            node.tier,
            node.org_id,
            created,
        ),
    )


async def enroll_node(store: Store, join_token_secret: str) -> EnrolledNode:
    """Enroll a new node with a join token: a new ``node_`` id and ``rpn_`` credential.

    The token stays usable (fleet token); its ``last_used_at`` is set. Raises
    :class:`EnrollmentRefused` for a malformed, unknown or revoked token. The check and
    the insert are one transaction, and the conditional UPDATE takes the row lock first,
    so a concurrent revocation either precedes the enrollment (refused) or follows it.
    """
    if not isinstance(join_token_secret, str) or not join_token_secret.startswith(
        JOIN_TOKEN_PREFIX
    ):
        raise EnrollmentRefused(
            "malformed_join_token",
            f"that is not a join token (join tokens start with {JOIN_TOKEN_PREFIX!r}); pass "
            "the token printed by POST /v1/nodes/join-tokens to `runplane agent --join-token`",
        )
    presented = hash_secret(join_token_secret)
    node_id = new_id(NODE_ID_PREFIX)
    credential = new_secret(NODE_CREDENTIAL_PREFIX)
    now = now_ms()

    def enroll(tx: Tx) -> EnrolledNode:
        usable = tx.execute(
            "UPDATE join_tokens SET last_used_at = ? WHERE secret_hash = ? AND revoked_at IS NULL",
            (now, presented),
        )
        row = tx.fetchone(
            "SELECT id, secret_hash, tier, org_id, revoked_at FROM join_tokens "
            "WHERE secret_hash = ?",
            (presented,),
        )
        if row is None or not secrets_equal(row["secret_hash"], presented):
            raise EnrollmentRefused(
                "unknown_join_token",
                "this join token is not known to the server (mistyped, or minted on another "
                "server); ask the operator for a current one (POST /v1/nodes/join-tokens)",
            )
        if not usable or row["revoked_at"] is not None:
            raise EnrollmentRefused(
                "revoked_join_token",
                f"join token {row['id']} was revoked; ask the operator for a new join token "
                "(POST /v1/nodes/join-tokens) and restart the agent with it",
            )
        node = EnrolledNode(node_id, credential, row["tier"], row["org_id"])
        _insert_credential(tx, node, row["id"], now)
        return node

    try:
        node = await store.transaction(enroll)
    except EnrollmentRefused as exc:
        log.warning("enrollment refused", extra={"code": exc.code})
        raise
    log.info(
        "node enrolled",
        extra={"node_id": node.node_id, "tier": node.tier, "org_id": node.org_id},
    )
    return node


async def open_enroll(store: Store) -> EnrolledNode:
    """Enroll a node without a join token (open deploys, see :func:`open_enrollment_allowed`):
    tier ``community``, org ``org_default``. The caller decides whether this is allowed."""
    node = EnrolledNode(
        new_id(NODE_ID_PREFIX), new_secret(NODE_CREDENTIAL_PREFIX), DEFAULT_TIER, DEFAULT_ORG
    )
    created = now_ms()
    await store.transaction(lambda tx: _insert_credential(tx, node, None, created))
    log.info(
        "node enrolled without a join token",
        extra={"node_id": node.node_id, "tier": node.tier, "org_id": node.org_id},
    )
    return node


async def verify_node_credential(store: Store, secret: str) -> NodeIdentity | None:
    """The node a credential (``rpn_...``) belongs to; None if unknown, malformed or revoked."""
    if not isinstance(secret, str) or not secret.startswith(NODE_CREDENTIAL_PREFIX):
        return None
    presented = hash_secret(secret)
    row = await store.fetchone(
        "SELECT node_id, secret_hash, tier, org_id, revoked_at FROM node_credentials "
        "WHERE secret_hash = ?",
        (presented,),
    )
    if row is None or not secrets_equal(row["secret_hash"], presented):
        return None
    if row["revoked_at"] is not None:
        return None
    return NodeIdentity(row["node_id"], row["tier"], row["org_id"])


async def revoke_node_credential(store: Store, node_id: str) -> bool:
    """Revoke one node's credential (the node must enroll again, as a new node).
    False when the node is unknown; idempotent otherwise."""
    known, changed = await revoke(store, "node_credentials", "node_id", node_id)
    if changed:
        log.info("node credential revoked", extra={"node_id": node_id})
    return known


async def rotate_node_credential(store: Store, node_id: str) -> str | None:
    """Replace a live node's credential: returns the new ``rpn_`` secret (shown once); the
    old one stops working at once. None when the node is unknown or its credential revoked."""
    secret = new_secret(NODE_CREDENTIAL_PREFIX)
    changed = await store.execute(
        "UPDATE node_credentials SET secret_hash = ? WHERE node_id = ? AND revoked_at IS NULL",
        (hash_secret(secret), node_id),
    )
    if not changed:
        return None
    log.info("node credential rotated", extra={"node_id": node_id})
    return secret


async def revoke_nodes_enrolled_by(store: Store, join_token_id: str) -> int:
    """Revoke the credentials of every node enrolled with a join token (a leaked token:
    revoke it, then this). Returns how many credentials were revoked now."""
    count = await store.execute(
        "UPDATE node_credentials SET revoked_at = ? WHERE join_token_id = ? AND revoked_at IS NULL",
        (now_ms(), join_token_id),
    )
    if count:
        log.info(
            "node credentials revoked by join token",
            extra={"join_token_id": join_token_id, "count": count},
        )
    return count
