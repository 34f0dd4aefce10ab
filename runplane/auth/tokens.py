"""Access tokens (``tok_`` id, ``rpt_`` secret): minted by the operator, scoped, revocable.

- A token belongs to one org and carries a subject, a kind (``user`` | ``service``), an
  optional role and a fixed list of scopes (the role's bundle, or explicit scopes; a user
  token with neither holds ``*``; a service token with neither is read-only).
- The secret is returned once (:class:`MintResult`), stored only as its hex SHA-256, looked
  up by that hash and compared in constant time. Nothing else ever shows it.
- A revoked token stops working on the very next request: every request looks the token up
  (an indexed read), nothing is cached.

Async functions over a :class:`~runplane.persistence.Store` (tables of migration 0005).
"""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from runplane.auth.principal import InvalidCredential, Principal
from runplane.auth.roles import ALL, ROLE_NAMES, bundle, normalize_scopes
from runplane.ids import hash_secret, new_id, new_secret, secrets_equal, valid_org_id
from runplane.persistence import Row, Store, from_json, now_ms, to_json
from runplane.persistence.revocable import newest_first, revoke
from runplane.timefmt import iso_ms

log = logging.getLogger("runplane.auth")

TOKEN_ID_PREFIX = "tok_"
TOKEN_PREFIX = "rpt_"
SUBJECT_MAX = 200
NAME_MAX = 200

MINT_NOTE = (
    "Store this token now: it is shown only once and cannot be recovered (only its hash is "
    "kept). Send it as `Authorization: Bearer <token>`; revoke it with "
    "DELETE /v1/auth/tokens/{id}."
)

TokenKind = Literal["user", "service"]


class TokenView(BaseModel):
    """A token as listed: no secret (spec TokenView, plus ``role``)."""

    model_config = ConfigDict(frozen=True)

    id: str
    kind: str
    subject: str
    org_id: str
    name: str
    role: str | None
    scopes: list[str]
    created_at: str
    revoked: bool


class MintResult(BaseModel):
    """The answer to minting: the only time the secret is shown (spec MintResult)."""

    model_config = ConfigDict(frozen=True)

    id: str
    token: str = Field(repr=False)
    kind: str
    subject: str
    org_id: str
    role: str | None
    scopes: list[str]
    note: str

    @classmethod
    def of(cls, view: TokenView, token: str) -> MintResult:
        return cls(
            id=view.id,
            token=token,
            kind=view.kind,
            subject=view.subject,
            org_id=view.org_id,
            role=view.role,
            scopes=view.scopes,
            note=MINT_NOTE,
        )


def resolve_scopes(
    kind: str, role: str | None, scopes: list[str] | tuple[str, ...] | None
) -> tuple[str, ...]:
    """MintBody semantics: a role expands to its bundle; else the explicit scopes; a user
    with neither holds ``*``, a service with neither none. ValueError for both, an unknown
    role or an unknown scope."""
    if role is not None and scopes is not None:
        raise ValueError("give either a role or explicit scopes, not both")
    if role is not None:
        if role not in ROLE_NAMES:
            raise ValueError(f"unknown role {role!r}; accepted: {', '.join(ROLE_NAMES)}")
        return bundle(role)
    if scopes is not None:
        return normalize_scopes(scopes)
    return (ALL,) if kind == "user" else ()


def _view(row: Row) -> TokenView:
    return TokenView(
        id=row["id"],
        kind=row["kind"],
        subject=row["subject"],
        org_id=row["org_id"],
        name=row["name"],
        role=row["role"],
        scopes=list(from_json(row["scopes"])),
        created_at=iso_ms(int(row["created_at"])),
        revoked=row["revoked_at"] is not None,
    )


_COLUMNS = "id, kind, subject, org_id, name, role, scopes, created_at, revoked_at"


async def mint_token(
    store: Store,
    *,
    subject: str,
    kind: TokenKind = "user",
    org_id: str = "org_default",
    name: str = "",
    role: str | None = None,
    scopes: list[str] | tuple[str, ...] | None = None,
) -> tuple[TokenView, str]:
    """Mint an access token; return its view and its secret (``rpt_...``, shown once).
    ValueError for a bad kind, subject, org id, name, role or scope (see resolve_scopes)."""
    if kind not in ("user", "service"):
        raise ValueError(f"kind {kind!r} is not one of user, service")
    if not subject.strip() or len(subject) > SUBJECT_MAX:
        raise ValueError(f"subject must be 1-{SUBJECT_MAX} characters")
    if not valid_org_id(org_id):
        raise ValueError(f"org_id {org_id!r} is not an org id (org_ + [a-z0-9_-], max 64)")
    if len(name) > NAME_MAX:
        raise ValueError(f"name is {len(name)} characters; at most {NAME_MAX} are accepted")
    held = resolve_scopes(kind, role, scopes)
    token_id = new_id(TOKEN_ID_PREFIX)
    secret = new_secret(TOKEN_PREFIX)
    created = now_ms()
    await store.execute(
        "INSERT INTO access_tokens (id, secret_hash, kind, subject, org_id, name, role, scopes,"
        " created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (token_id, hash_secret(secret), kind, subject, org_id, name, role, to_json(held), created),
    )
    log.info(
        "access token minted",
        extra={"token_id": token_id, "org_id": org_id, "kind": kind, "role": role},
    )
    view = TokenView(
        id=token_id,
        kind=kind,
        subject=subject,
        org_id=org_id,
        name=name,
        role=role,
        scopes=list(held),
        created_at=iso_ms(created),
        revoked=False,
    )
    return view, secret


async def list_tokens(store: Store, org_id: str | None = None) -> list[TokenView]:
    """Tokens newest first (revoked ones included, flagged); only ``org_id``'s if given."""
    return [_view(row) for row in await newest_first(store, "access_tokens", _COLUMNS, org_id)]


async def get_token(store: Store, token_id: str) -> TokenView | None:
    row = await store.fetchone(f"SELECT {_COLUMNS} FROM access_tokens WHERE id = ?", (token_id,))
    return None if row is None else _view(row)


async def revoke_token(store: Store, token_id: str) -> bool:
    """Revoke a token: it is refused from the next request on. False for an unknown id.
    Idempotent (the first revocation time is kept)."""
    known, changed = await revoke(store, "access_tokens", "id", token_id)
    if changed:
        log.info("access token revoked", extra={"token_id": token_id})
    return known


async def verify_token(store: Store, secret: str) -> Principal:
    """The principal of a live access token; InvalidCredential if unknown or revoked."""
    presented = hash_secret(secret)
    row = await store.fetchone(
        f"SELECT secret_hash, {_COLUMNS} FROM access_tokens WHERE secret_hash = ?", (presented,)
    )
    if row is None or not secrets_equal(row["secret_hash"], presented):
        raise InvalidCredential("unknown access token")
    if row["revoked_at"] is not None:
        raise InvalidCredential(f"access token {row['id']} was revoked")
    return Principal(
        kind=row["kind"],
        subject=row["subject"],
        org_id=row["org_id"],
        read_org=row["org_id"],
        name=row["name"],
        scopes=tuple(from_json(row["scopes"])),
        role=row["role"],
        credential="token",
        credential_id=row["id"],
    )
