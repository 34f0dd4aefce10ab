"""Git connections: an org's credential for one repository on a git provider
(``/v1/git/connections``, docs/git.md).

A connection holds the provider (forgejo, gitea, gitlab, github), its origin
(``base_url``), the repository (``repo_url``) and a credential: a personal access token
(``https_pat``) or an SSH deploy key (``ssh_deploy_key``; without a secret the server
generates an ed25519 key pair and returns the public half once, as ``ssh_pub``). The
secret is sealed at rest (AES-256-GCM, the connection id as associated data), never shown,
never logged. ``status`` is ``active`` once the server reached the repository with it, or
``degraded`` with the reason (not resolvable, no answer within 5 s, credential refused,
deploy key not installed yet); it is checked at create and again on use.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import BaseModel, ConfigDict, Field

from runplane.egress import BadUrl, parse_url
from runplane.ids import new_id
from runplane.persistence import Store, now_ms
from runplane.problems import FieldProblem, Problem, not_found
from runplane.sealing import Sealer
from runplane.timefmt import iso_ms

from .probe import Credential

CONNECTION_PREFIX = "gc_"
PROVIDERS = ("forgejo", "gitea", "gitlab", "github")
AUTH_KINDS = ("https_pat", "ssh_deploy_key")
ACTIVE, DEGRADED = "active", "degraded"
#: ``git@host:path`` (scp-like) or ``ssh://[user@]host[:port]/path``
_SSH_URL = re.compile(r"^(ssh://[^\s/@]+@?[^\s/]*/\S+|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:\S+)$")
_COLUMNS = (
    "id, org_id, provider, base_url, repo_url, auth_kind, secret, ssh_pub, label, "
    "default_ref, report_status, status, status_reason, created_by, created_at, updated_at"
)


class GitConnectionBody(BaseModel):
    """GitConnectionBody; enums and URLs are checked by hand (400 naming the field)."""

    model_config = ConfigDict(extra="forbid")

    provider: Any = None
    base_url: Any = None
    repo_url: Any = None
    auth_kind: Any = None
    secret: str | None = Field(None, max_length=16384)
    label: str | None = Field(None, max_length=200)
    default_ref: str | None = Field(None, max_length=256)
    report_status: bool | None = None


@dataclass(frozen=True, slots=True)
class Connection:
    id: str
    org_id: str
    provider: str
    base_url: str
    repo_url: str
    auth_kind: str
    sealed_secret: str
    ssh_pub: str
    label: str
    default_ref: str
    report_status: bool
    status: str
    status_reason: str
    created_by: str
    created_at: int
    updated_at: int

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Connection:
        return cls(
            id=row["id"],
            org_id=row["org_id"],
            provider=row["provider"],
            base_url=row["base_url"],
            repo_url=row["repo_url"],
            auth_kind=row["auth_kind"],
            sealed_secret=row["secret"],
            ssh_pub=row["ssh_pub"],
            label=row["label"],
            default_ref=row["default_ref"],
            report_status=bool(row["report_status"]),
            status=row["status"],
            status_reason=row["status_reason"],
            created_by=row["created_by"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )

    def view(self, *, created: bool = False, note: str = "") -> dict[str, Any]:
        """GitConnectionView: never the secret; ``ssh_pub`` only in the creating answer."""
        out: dict[str, Any] = {
            "id": self.id,
            "org_id": self.org_id,
            "provider": self.provider,
            "base_url": self.base_url,
            "repo_url": self.repo_url,
            "auth_kind": self.auth_kind,
            "label": self.label,
            "default_ref": self.default_ref,
            "status": self.status,
            # an addition: why a connection is degraded ('' when active)
            "status_reason": self.status_reason,
            "ssh_pub": self.ssh_pub if created else "",
            "report_status": self.report_status,
            "created_at": iso_ms(self.created_at),
            "note": note if created else "",
        }
        return out

    def credential(self, sealer: Sealer) -> Credential:
        return Credential(
            self.provider, self.auth_kind, sealer.open(self.sealed_secret, aad=self.id)
        )


def _bad(field: str, message: str, code: str = "invalid_field") -> Problem:
    return Problem(400, code, message, [FieldProblem(field, "invalid", message)])


def _choice(value: Any, field: str, choices: tuple[str, ...], default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if value is None or value == "":
        message = f"{field} is required: one of {', '.join(choices)}"
        raise Problem(400, "missing_field", message, [FieldProblem(field, "missing", message)])
    if value not in choices:
        raise _bad(field, f"{field} {str(value)[:40]!r} is not one of {', '.join(choices)}")
    return str(value)


def _http_url(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        message = f"{field} is required: an http(s) URL"
        raise Problem(400, "missing_field", message, [FieldProblem(field, "missing", message)])
    try:
        parse_url(value)
    except BadUrl as exc:
        raise _bad(field, f"{field}: {exc}") from None
    return value.rstrip("/")


@dataclass(frozen=True, slots=True)
class Checked:
    """A valid body: what to store (secret still in clear: sealed by :func:`new`)."""

    provider: str
    base_url: str
    repo_url: str
    auth_kind: str
    secret: str | None
    label: str
    default_ref: str
    report_status: bool


def check(body: GitConnectionBody) -> Checked:
    """400 for a bad field, 422 for the policy (a github connection is PAT-only)."""
    provider = _choice(body.provider, "provider", PROVIDERS)
    auth_kind = _choice(body.auth_kind, "auth_kind", AUTH_KINDS, default="https_pat")
    base_url = _http_url(body.base_url, "base_url")
    if auth_kind == "https_pat":
        repo_url = _http_url(body.repo_url, "repo_url")
        if not body.secret:
            message = "secret is required for https_pat: the personal access token"
            raise Problem(
                400, "missing_field", message, [FieldProblem("secret", "missing", message)]
            )
    else:
        if provider == "github":
            message = "a github connection is PAT-only (auth_kind https_pat)"
            raise Problem(
                422, "policy_violation", message, [FieldProblem("auth_kind", "policy", message)]
            )
        repo_url = body.repo_url if isinstance(body.repo_url, str) else ""
        if not _SSH_URL.match(repo_url):
            raise _bad(
                "repo_url", "repo_url for ssh_deploy_key: git@host:owner/repo.git or ssh://..."
            )
        if body.secret and "PRIVATE KEY-----" not in body.secret:
            raise _bad("secret", "secret for ssh_deploy_key: an OpenSSH private key (or omit it)")
    return Checked(
        provider,
        base_url,
        repo_url,
        auth_kind,
        body.secret or None,
        body.label or "",
        body.default_ref or "",
        True if body.report_status is None else body.report_status,
    )


def generate_deploy_key(comment: str) -> tuple[str, str]:
    """A new ed25519 key pair: (OpenSSH private key, ``ssh-ed25519 AAAA... comment``)."""
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    ).decode("ascii")
    public = (
        key.public_key()
        .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        .decode("ascii")
    )
    return private, f"{public} {comment}"


def new(sealer: Sealer, checked: Checked, *, org_id: str, created_by: str) -> Connection:
    """A new connection (not stored; status to be settled by a probe)."""
    conn_id = new_id(CONNECTION_PREFIX)
    secret, ssh_pub = checked.secret, ""
    if secret is None:  # a keyless ssh_deploy_key: generate the pair
        secret, ssh_pub = generate_deploy_key(f"runplane-{conn_id}")
    now = now_ms()
    return Connection(
        id=conn_id,
        org_id=org_id,
        provider=checked.provider,
        base_url=checked.base_url,
        repo_url=checked.repo_url,
        auth_kind=checked.auth_kind,
        sealed_secret=sealer.seal(secret, aad=conn_id),
        ssh_pub=ssh_pub,
        label=checked.label,
        default_ref=checked.default_ref,
        report_status=checked.report_status,
        status=DEGRADED,
        status_reason="not checked yet",
        created_by=created_by,
        created_at=now,
        updated_at=now,
    )


def with_status(conn: Connection, status: str, reason: str) -> Connection:
    return replace(conn, status=status, status_reason=reason, updated_at=now_ms())


async def insert(store: Store, conn: Connection) -> None:
    await store.execute(
        f"INSERT INTO git_connections ({_COLUMNS}) VALUES ({','.join('?' * 16)})",
        (
            conn.id,
            conn.org_id,
            conn.provider,
            conn.base_url,
            conn.repo_url,
            conn.auth_kind,
            conn.sealed_secret,
            conn.ssh_pub,
            conn.label,
            conn.default_ref,
            int(conn.report_status),
            conn.status,
            conn.status_reason,
            conn.created_by,
            conn.created_at,
            conn.updated_at,
        ),
    )


async def set_status(store: Store, conn_id: str, status: str, reason: str) -> None:
    await store.execute(
        "UPDATE git_connections SET status = ?, status_reason = ?, updated_at = ? WHERE id = ?",
        (status, reason[:500], now_ms(), conn_id),
    )


async def get(store: Store, conn_id: str, org_id: str | None) -> Connection:
    """404 when unknown or another org's (``org_id`` None: any org's)."""
    row = await store.fetchone(f"SELECT {_COLUMNS} FROM git_connections WHERE id = ?", (conn_id,))
    if row is None or (org_id is not None and row["org_id"] != org_id):
        raise not_found("git connection")
    return Connection.of(row)


async def find(store: Store, conn_id: str) -> Connection | None:
    row = await store.fetchone(f"SELECT {_COLUMNS} FROM git_connections WHERE id = ?", (conn_id,))
    return None if row is None else Connection.of(row)


async def listing(store: Store, org_id: str | None) -> list[Connection]:
    if org_id is None:
        rows = await store.fetchall(f"SELECT {_COLUMNS} FROM git_connections ORDER BY id DESC", ())
    else:
        rows = await store.fetchall(
            f"SELECT {_COLUMNS} FROM git_connections WHERE org_id = ? ORDER BY id DESC", (org_id,)
        )
    return [Connection.of(r) for r in rows]
