"""Share links and embed grants (docs/sharing.md): read-only, single-job, expiring
credentials a person hands to someone without an account.

Each is a row of ``job_shares`` (who made it, for which job, until when, which categories)
and a token signed with the server's key naming that row: ``rpsh_`` for a share code,
``rpem_`` for an embed token (``runplane/signed.py``; the two contexts differ, so one
cannot pass for the other). A token is good while its signature holds, its row exists,
is not revoked and has not expired: checked on every use, so a revocation takes effect at
once (fail closed).

What a token reads is its job's categories: ``view`` (the Job itself, always), ``logs``
(logs and the SSE events), ``metrics``, ``streams`` (streams and the recording),
``artifacts``. A share link allows all of them; an embed grant those in ``allow`` (empty:
all).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from runplane import signed
from runplane.ids import new_id
from runplane.persistence import Store, from_json, now_ms, to_json

SHARE_PREFIX, EMBED_PREFIX = "rpsh_", "rpem_"
_CONTEXT = {"share": b"runplane share link v1", "embed": b"runplane embed grant v1"}
Category = Literal["logs", "metrics", "streams", "artifacts"]
SHARE_TTL_HOURS = 720
EMBED_TTL_HOURS, EMBED_MAX_HOURS = 24, 720


class ShareBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ttl_hours: int = Field(SHARE_TTL_HOURS, ge=1, le=SHARE_TTL_HOURS)


class Branding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: Annotated[str, StringConstraints(max_length=200)] = ""
    logo_url: Annotated[str, StringConstraints(max_length=2048)] = ""
    accent: Annotated[str, StringConstraints(max_length=32)] = ""


class EmbedMintBody(BaseModel):
    """ttl_hours default 24, capped at 720 (a larger value is capped, not refused)."""

    model_config = ConfigDict(extra="forbid")

    ttl_hours: int = Field(EMBED_TTL_HOURS, ge=1)
    allow: list[Category] = []
    branding: Branding = Branding()


@dataclass(frozen=True, slots=True)
class Grant:
    """A live share or embed grant, as a verified token shows it."""

    id: str
    kind: str  # share | embed
    job_id: str
    org_id: str
    allow: tuple[str, ...]  # () = every category
    branding: dict[str, str]
    expires_at: int  # unix ms

    def allows(self, category: str) -> bool:
        return category == "view" or not self.allow or category in self.allow

    def grant_view(self) -> dict[str, Any]:
        """EmbedGrantView: job, allow, exp (unix seconds), branding."""
        return {
            "job": self.job_id,
            "allow": list(self.allow),
            "exp": self.expires_at // 1000,
            "branding": {
                "title": self.branding.get("title", ""),
                "logo_url": self.branding.get("logo_url", ""),
                "accent": self.branding.get("accent", ""),
            },
        }


class Refused(Exception):
    """Not a live token: malformed, tampered, unknown, revoked or expired."""


def _prefix(kind: str) -> str:
    return SHARE_PREFIX if kind == "share" else EMBED_PREFIX


async def mint(
    store: Store,
    key: bytes,
    *,
    kind: str,
    job_id: str,
    org_id: str,
    by: str,
    ttl_hours: int,
    allow: list[str] | None = None,
    branding: dict[str, str] | None = None,
) -> tuple[str, Grant]:
    """Store a grant and sign its token; (token, grant)."""
    now = now_ms()
    grant = Grant(
        id=new_id("shr_" if kind == "share" else "emb_"),
        kind=kind,
        job_id=job_id,
        org_id=org_id,
        allow=tuple(sorted(set(allow or ()))),
        branding=dict(branding or {}),
        expires_at=now + ttl_hours * 3600 * 1000,
    )
    await store.execute(
        "INSERT INTO job_shares (id, kind, job_id, org_id, allow, branding, created_by,"
        " created_at, expires_at, revoked_at) VALUES (?,?,?,?,?,?,?,?,?,NULL)",
        (
            grant.id,
            kind,
            job_id,
            org_id,
            to_json(list(grant.allow)),
            to_json(grant.branding),
            by,
            now,
            grant.expires_at,
        ),
    )
    claims = {"g": grant.id, "j": job_id, "exp": grant.expires_at // 1000}
    return signed.sign(key, _CONTEXT[kind], _prefix(kind), claims), grant


def kind_of(token: str) -> str | None:
    if token.startswith(SHARE_PREFIX):
        return "share"
    if token.startswith(EMBED_PREFIX):
        return "embed"
    return None


async def verify(store: Store, key: bytes, token: str, *, kind: str | None = None) -> Grant:
    """The live grant ``token`` names; :class:`Refused` otherwise (of another ``kind``
    too, when one is asked for)."""
    found = kind_of(token)
    if found is None or (kind is not None and found != kind):
        raise Refused("not a share or embed token")
    try:
        claims = signed.claims_of(key, _CONTEXT[found], _prefix(found), token)
    except signed.SignatureInvalid as exc:
        raise Refused(str(exc)) from None
    if not isinstance(claims.get("exp"), int) or claims["exp"] <= time.time():
        raise Refused("expired")
    row = await store.fetchone(
        "SELECT id, kind, job_id, org_id, allow, branding, expires_at, revoked_at"
        " FROM job_shares WHERE id = ?",
        (str(claims.get("g", "")),),
    )
    if (
        row is None
        or row["kind"] != found
        or row["job_id"] != claims.get("j")
        or row["revoked_at"] is not None
        or row["expires_at"] <= now_ms()
    ):
        raise Refused("revoked, expired or unknown")
    return Grant(
        id=row["id"],
        kind=row["kind"],
        job_id=row["job_id"],
        org_id=row["org_id"],
        allow=tuple(from_json(row["allow"])),
        branding=from_json(row["branding"]) if row["branding"] else {},
        expires_at=int(row["expires_at"]),
    )


async def revoke(store: Store, job_id: str, *, kind: str = "share") -> int:
    """Revoke every live grant of ``kind`` of the job; how many."""
    return await store.execute(
        "UPDATE job_shares SET revoked_at = ? WHERE job_id = ? AND kind = ? AND revoked_at IS NULL",
        (now_ms(), job_id, kind),
    )
