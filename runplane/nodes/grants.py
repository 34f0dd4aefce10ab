"""Cross-org node grants: an org that owns nodes (``shape.owner_of``) lets another org place
jobs on them, as if it owned them: all its nodes, one node, or its nodes of one tier, until
an optional expiry or until revoked. Placement reads the active grants (``grantees``) into
each node's shape; a change takes effect on the scheduler's next tick (queued jobs of a
revoked grantee stop matching; running ones finish)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from runplane.ids import new_id
from runplane.persistence import Store, now_ms
from runplane.placement import Tier
from runplane.problems import FieldProblem, Problem, not_found
from runplane.timefmt import iso_ms_or_none

from . import repo
from .shape import owner_of

GRANT_ID_PREFIX = "ng_"
KINDS = ("all", "node", "tier")
_COLUMNS = "id, owner_org, grantee_org, kind, node_id, tier, created_by, created_at, expires_at"


class GrantBody(BaseModel):
    """NodeGrantBody. ``selector`` is checked by hand (a bad one is a 422, not a 400)."""

    model_config = ConfigDict(extra="forbid")

    owner_org: str | None = None
    grantee_org: str | None = None
    selector: dict[str, Any] | None = None
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Grant:
    id: str
    owner_org: str
    grantee_org: str
    kind: str
    node_id: str | None
    tier: str | None
    created_by: str
    created_at: int
    expires_at: int | None

    def matches(self, node_id: str, owner: str | None, tier: str) -> bool:
        if owner != self.owner_org:
            return False
        if self.kind == "node":
            return node_id == self.node_id
        if self.kind == "tier":
            return tier == self.tier
        return True

    def live(self, now: int) -> bool:
        return self.expires_at is None or self.expires_at > now

    def view(self) -> dict[str, Any]:
        selector: dict[str, Any] = {"kind": self.kind}
        if self.kind == "node":
            selector["node_id"] = self.node_id
        if self.kind == "tier":
            selector["tier"] = self.tier
        return {
            "id": self.id,
            "owner_org": self.owner_org,
            "grantee_org": self.grantee_org,
            "selector": selector,
            "created_by": self.created_by,
            "created_at": iso_ms_or_none(self.created_at),
            "expires_at": iso_ms_or_none(self.expires_at),
        }


def grantees(grants: Iterable[Grant], node_id: str, owner: str | None, tier: str) -> frozenset[str]:
    """The orgs the live ``grants`` let use a node (its id, owner and tier label)."""
    if owner is None:
        return frozenset()
    return frozenset(g.grantee_org for g in grants if g.matches(node_id, owner, tier))


def _unprocessable(key: str, message: str) -> Problem:
    return Problem(422, "invalid_selector", message, [FieldProblem(key, "invalid", message)])


async def _selected(
    store: Store, selector: dict[str, Any], owner: str
) -> tuple[str, str | None, str | None]:
    """The grant's selector checked: (kind, node id, tier); a node must be ``owner``'s."""
    kind = selector.get("kind", "all")
    if kind not in KINDS:
        raise _unprocessable("selector.kind", f"selector.kind is one of {', '.join(KINDS)}")
    node_id = tier = None
    if kind == "node":
        node_id = selector.get("node_id")
        if not isinstance(node_id, str) or not node_id:
            raise _unprocessable("selector.node_id", "a node selector names node_id")
        node = await repo.get(store, node_id)
        if node is None:
            raise not_found("node")
        if owner_of(node.org_id) != owner:
            raise _unprocessable(
                "selector.node_id", f"node {node_id} is not owned by {owner}: it cannot grant it"
            )
    elif kind == "tier":
        tier = selector.get("tier")
        try:
            tier = Tier.parse(tier).label if isinstance(tier, str) else None
        except ValueError:
            tier = None
        if tier is None:
            raise _unprocessable(
                "selector.tier", "a tier selector names tier: community, partner or trusted"
            )
    return kind, node_id, tier


async def create(
    store: Store, body: GrantBody, *, caller_org: str, superuser: bool, created_by: str
) -> Grant:
    if superuser and not body.owner_org:
        message = "the admin token names the owner_org whose nodes it grants"
        raise Problem(
            400, "missing_field", message, [FieldProblem("owner_org", "missing", message)]
        )
    owner = body.owner_org or caller_org
    if not superuser and owner != caller_org:
        raise not_found("org")  # another org's: as unknown
    if not body.grantee_org:
        message = "grantee_org is required: the org that may place jobs on the nodes"
        raise Problem(
            400, "missing_field", message, [FieldProblem("grantee_org", "missing", message)]
        )
    kind, node_id, tier = await _selected(store, body.selector or {"kind": "all"}, owner)
    expires = None if body.expires_at is None else int(body.expires_at.timestamp() * 1000)
    grant = Grant(
        id=new_id(GRANT_ID_PREFIX),
        owner_org=owner,
        grantee_org=body.grantee_org,
        kind=kind,
        node_id=node_id,
        tier=tier,
        created_by=created_by,
        created_at=now_ms(),
        expires_at=expires,
    )
    await store.execute(
        f"INSERT INTO node_grants ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?)",
        (
            grant.id,
            grant.owner_org,
            grant.grantee_org,
            grant.kind,
            grant.node_id,
            grant.tier,
            grant.created_by,
            grant.created_at,
            grant.expires_at,
        ),
    )
    return grant


def _of(row: Any) -> Grant:
    return Grant(
        id=row["id"],
        owner_org=row["owner_org"],
        grantee_org=row["grantee_org"],
        kind=row["kind"],
        node_id=row["node_id"],
        tier=row["tier"],
        created_by=row["created_by"],
        created_at=int(row["created_at"]),
        expires_at=row["expires_at"],
    )


async def live(store: Store, now: int) -> list[Grant]:
    """Every grant not expired at ``now``."""
    rows = await store.fetchall(
        f"SELECT {_COLUMNS} FROM node_grants WHERE expires_at IS NULL OR expires_at > ?", (now,)
    )
    return [_of(r) for r in rows]


async def listing(store: Store, org_id: str | None) -> dict[str, list[dict[str, Any]]]:
    """``{issued, received}`` of ``org_id`` (None: every grant, as issued)."""
    if org_id is None:
        rows = await store.fetchall(f"SELECT {_COLUMNS} FROM node_grants ORDER BY id DESC")
        return {"issued": [_of(r).view() for r in rows], "received": []}
    issued = await store.fetchall(
        f"SELECT {_COLUMNS} FROM node_grants WHERE owner_org = ? ORDER BY id DESC", (org_id,)
    )
    received = await store.fetchall(
        f"SELECT {_COLUMNS} FROM node_grants WHERE grantee_org = ? ORDER BY id DESC", (org_id,)
    )
    return {
        "issued": [_of(r).view() for r in issued],
        "received": [_of(r).view() for r in received],
    }


async def revoke(store: Store, grant_id: str, owner_org: str | None) -> Grant:
    """Delete the grant (``owner_org``'s; None: any); a 404 for unknown or another org's."""
    row = await store.fetchone(f"SELECT {_COLUMNS} FROM node_grants WHERE id = ?", (grant_id,))
    if row is None or (owner_org is not None and row["owner_org"] != owner_org):
        raise not_found("grant")
    await store.execute("DELETE FROM node_grants WHERE id = ?", (grant_id,))
    return _of(row)


def next_expiry(grants: Sequence[Grant]) -> int | None:
    times = [g.expires_at for g in grants if g.expires_at is not None]
    return min(times) if times else None
