"""Scopes and roles: the fixed scope bundle of each role (see docs/auth.md).

A scope is what a token may *do* to runs and nodes (reads need no scope: every
authenticated principal may read what its org owns). ``*`` holds every scope.

| role   | scopes                                                        | manage tier |
|--------|---------------------------------------------------------------|-------------|
| owner  | ``*``                                                         | yes         |
| admin  | ``*``                                                         | yes         |
| member | runs:submit, runs:cancel, runs:priority, runs:share, git:read | no          |
| viewer | (none: read only)                                             | no          |

Owners and admins differ only in membership administration: an admin may not grant the
owner or admin role, nor remove or change an owner or admin (docs/auth.md).
"""

from __future__ import annotations

from typing import Literal

ALL = "*"
SCOPES: tuple[str, ...] = (
    ALL,
    "runs:submit",
    "runs:cancel",
    "runs:priority",
    "runs:manage",
    "runs:share",
    "nodes:grant",
    "git:connect",
    "git:read",
)

RoleName = Literal["owner", "admin", "member", "viewer"]
ROLE_NAMES: tuple[str, ...] = ("owner", "admin", "member", "viewer")

#: Each role's fixed scope bundle, in the order ``GET /v1/roles`` lists them.
ROLES: dict[str, tuple[str, ...]] = {
    "owner": (ALL,),
    "admin": (ALL,),
    "member": ("runs:submit", "runs:cancel", "runs:priority", "runs:share", "git:read"),
    "viewer": (),
}

#: Roles that make a principal an org manager (the spec's "Manage" tier).
MANAGER_ROLES = frozenset({"owner", "admin"})
#: Roles only an owner (or the operator) may grant, change or remove.
PRIVILEGED_ROLES = frozenset({"owner", "admin"})


def bundle(role: str) -> tuple[str, ...]:
    """The scopes of ``role``; KeyError for an unknown role."""
    return ROLES[role]


def normalize_scopes(scopes: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Known scopes, deduplicated, in catalog order; ValueError naming the first unknown one.

    ``*`` absorbs the rest (a token with ``*`` holds every scope)."""
    unknown = [s for s in scopes if s not in SCOPES]
    if unknown:
        raise ValueError(f"unknown scope {unknown[0]!r}; accepted: {', '.join(SCOPES)}")
    if ALL in scopes:
        return (ALL,)
    return tuple(s for s in SCOPES if s in scopes)


def has_scope(held: tuple[str, ...] | list[str], scope: str) -> bool:
    return ALL in held or scope in held


def role_catalog() -> list[dict[str, object]]:
    """``GET /v1/roles``: Role[] ``{name, scopes}``."""
    return [{"name": name, "scopes": list(scopes)} for name, scopes in ROLES.items()]
