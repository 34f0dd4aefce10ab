"""Access decisions, free of HTTP: who a presented secret is (:func:`resolve`), a
principal's standing in an org (:func:`org_role`), and whether a route's rule lets it
through under the deployment's auth mode (:func:`decide`). The Quart hook that applies
them to every request is ``runplane/http/auth_hook.py``.

Modes (``RUNPLANE_AUTH``):

- ``off``: the anonymous caller may read and act (it sees every org, creates in
  ``org_default``); a presented credential is still checked and applied: an invalid one
  (an ``Authorization`` header that is not ``Bearer <a token this server issued>``) is 401
  on every route, public ones included, but those whose handler reads the credential
  itself (``Rule.reads_credential``); a real token lacking a scope is 403, admin and
  manage routes need their tier.
- ``required``: like off, but the anonymous caller is 401 on every non-public route.
- ``shadow``: decides like ``off`` and logs, at warning level, every request that
  ``required`` would have refused (route, principal, reason); it never refuses more than
  ``off`` does.
"""

from __future__ import annotations

from dataclasses import dataclass

from runplane.auth import identity, tokens
from runplane.auth.principal import ADMIN, InvalidCredential, Principal, anonymous
from runplane.auth.roles import MANAGER_ROLES
from runplane.auth.rules import Rule
from runplane.ids import secrets_equal
from runplane.persistence import Store
from runplane.problems import Problem, not_found
from runplane.settings import Settings

_CHALLENGE = {"WWW-Authenticate": "Bearer"}


@dataclass(frozen=True, slots=True)
class Denial:
    status: int
    code: str
    detail: str

    def problem(self) -> Problem:
        headers = dict(_CHALLENGE) if self.status == 401 else {}
        return Problem(self.status, self.code, self.detail, headers=headers)


def _unauthorized(detail: str) -> Denial:
    return Denial(401, "unauthorized", detail)


def decide(
    rule: Rule,
    principal: Principal,
    *,
    mode: str,
    invalid: str | None = None,
    admin_configured: bool = True,
    org_role: str | None = None,
) -> Denial | None:
    """Whether ``principal`` may use a route with ``rule`` under ``mode`` (off|required);
    ``invalid`` is why a presented credential was refused (the principal is then anon):
    a 401 whatever the rule, but where the handler reads the credential itself;
    ``org_role`` is the principal's standing in the route's org (``org_manage`` rules)."""
    need = rule.need
    if need in ("admin", "operator"):
        return _admin(need, principal, admin_configured, invalid)
    if invalid is not None and not rule.reads_credential:
        return _invalid(invalid)
    if need == "public":
        return None
    if not principal.authenticated:
        if need in ("manage", "org_manage", "user_session"):
            return _unauthorized("this route needs a bearer credential")
        if mode == "required":
            return _unauthorized(
                "this server requires a bearer credential (RUNPLANE_AUTH=required)"
            )
        return None  # the anonymous caller of an open deploy is left alone
    return _authenticated(rule, principal, org_role)


def _invalid(why: str) -> Denial:
    return _unauthorized(f"the bearer credential is not valid: {why}")


def _admin(
    need: str, principal: Principal, admin_configured: bool, invalid: str | None
) -> Denial | None:
    """An ``admin`` or ``operator`` rule: the operator admin token only."""
    if principal.superuser:
        return None
    if not admin_configured:
        return _unauthorized("admin routes need RUNPLANE_ADMIN_TOKEN to be set on the server")
    if invalid is not None:
        return _invalid(invalid)
    if need == "operator" and principal.authenticated:
        return Denial(403, "operator_token_required", "this route needs the operator admin token")
    return _unauthorized("this route needs the operator admin token as a bearer")


def _authenticated(rule: Rule, principal: Principal, org_role: str | None) -> Denial | None:
    """The rules past authentication: what this authenticated principal may do."""
    need = rule.need
    if need == "read":
        return None
    if need == "scope":
        assert rule.scope is not None
        if principal.has_scope(rule.scope):
            return None
        held = ", ".join(principal.scopes) or "none"
        return Denial(
            403, "missing_scope", f"this credential lacks scope {rule.scope} (it holds: {held})"
        )
    if need == "manage":
        if principal.is_manager:
            return None
        return Denial(
            403,
            "insufficient_role",
            "this route needs the admin token or an org owner/admin "
            f"(this credential's role: {principal.role or 'none'})",
        )
    if need == "org_manage":
        if principal.superuser or org_role in MANAGER_ROLES:
            return None
        if org_role is None:  # outside that org: the very 404 of an unknown org
            nf = not_found("org")
            return Denial(nf.status, nf.code, nf.detail)
        return Denial(
            403,
            "insufficient_role",
            f"managing this org's members needs the owner or admin role (yours: {org_role})",
        )
    if need == "user_session":
        if principal.credential == "session":
            return None
        return Denial(403, "user_session_required", "this route needs a user's login session token")
    raise AssertionError(f"unknown requirement {need!r}")


async def resolve(
    settings: Settings, store: Store, secret: str | None, *, org_id: str | None = None
) -> Principal:
    """The principal a presented secret stands for (anonymous for None).
    InvalidCredential when it identifies nobody."""
    if secret is None:
        return anonymous(sees_all=settings.auth != "required")
    admin = settings.admin_token
    if admin is not None and secrets_equal(secret, admin.get_secret_value()):
        return ADMIN
    if secret.startswith(tokens.TOKEN_PREFIX):
        return await tokens.verify_token(store, secret)
    if secret.startswith(identity.SESSION_PREFIX):
        if not store.supports_identity:
            raise InvalidCredential("session tokens need a database (identity is off)")
        return await identity.verify_session(store, secret, org_id=org_id)
    if secret.startswith(identity.LOGIN_TOKEN_PREFIX):
        raise InvalidCredential(
            "a login token is not a bearer: exchange it at POST /v1/auth/token first"
        )
    raise InvalidCredential("not a token this server issued")


async def org_role(store: Store, principal: Principal, org_id: str) -> str | None:
    """The principal's standing in ``org_id``: ``identity.SUPERUSER`` for the admin token,
    a login session's user's role there (live), an access token's role in its own org
    (``"none"`` for a token without a role); None outside the org."""
    if principal.superuser:
        return identity.SUPERUSER
    if principal.credential == "session":
        return await identity.member_role(store, org_id, principal.subject)
    if principal.authenticated and principal.org_id == org_id:
        return principal.role or "none"  # in the org, without a role: 403, not 404
    return None
