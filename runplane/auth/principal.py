"""Who is calling: the :class:`Principal` every request is resolved to.

Routes never look at credentials: the auth hook (``runplane/http/auth_hook.py``) resolves the
bearer to a Principal once per request, and ``runplane.http.caller.current_caller()`` turns
it into what tenancy needs (where creations land, which org reads are narrowed to).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from runplane.auth.roles import MANAGER_ROLES, has_scope

DEFAULT_ORG = "org_default"
#: The read org of an anonymous caller where auth is ``required``: matches no org, so such a
#: caller (only ever on public routes) reads nothing org-owned. It can never be an org id.
NO_ORG = ""

Kind = Literal["user", "service", "node", "anon"]
#: ``share``/``embed``: a share code or an embed token (runplane/auth/shares.py)
Credential = Literal["none", "admin", "token", "session", "share", "embed"]


@dataclass(frozen=True, slots=True)
class Principal:
    kind: Kind
    subject: str
    org_id: str  # where what it creates lands
    read_org: str | None  # reads are narrowed to this org; None = every org
    name: str = ""
    scopes: tuple[str, ...] = ()
    role: str | None = None
    superuser: bool = False  # the operator admin token
    credential: Credential = "none"
    credential_id: str | None = None  # tok_... (access token) or lgs_... (login session)

    @property
    def authenticated(self) -> bool:
        return self.credential != "none"

    @property
    def is_manager(self) -> bool:
        """The "Manage" tier: the admin token, or an org owner/admin (in its own org)."""
        return self.superuser or self.role in MANAGER_ROLES

    def has_scope(self, scope: str) -> bool:
        return self.superuser or has_scope(self.scopes, scope)

    def view(self) -> dict[str, Any]:
        """The spec's Principal ``{kind, subject, org_id, name, scopes}`` plus ``role`` and
        ``superuser`` (what the manage tier reads)."""
        return {
            "kind": self.kind,
            "subject": self.subject,
            "org_id": self.org_id,
            "name": self.name,
            "scopes": list(self.scopes),
            "role": self.role,
            "superuser": self.superuser,
        }

    def describe(self) -> str:
        """For log lines: ids only, never a secret."""
        if self.credential == "none":
            return "anonymous"
        if self.credential == "admin":
            return "admin token"
        return f"{self.credential} {self.credential_id} ({self.kind} {self.subject}, {self.org_id})"


def anonymous(*, sees_all: bool) -> Principal:
    """The caller without a credential. In an open deploy (auth ``off`` or ``shadow``) it
    sees every org (spec) and creates in ``org_default``."""
    return Principal(
        kind="anon",
        subject="anonymous",
        org_id=DEFAULT_ORG,
        read_org=None if sees_all else NO_ORG,
        name="anonymous",
    )


ADMIN = Principal(
    kind="service",
    subject="admin",
    org_id=DEFAULT_ORG,
    read_org=None,
    name="operator admin token",
    scopes=("*",),
    role=None,
    superuser=True,
    credential="admin",
)


class InvalidCredential(Exception):
    """A presented credential that identifies nobody. ``reason`` is safe to show and log:
    it never contains the secret (at most the credential's id)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason
