"""The auth layer: one ``before_request`` (and ``before_websocket``) hook in front of every
route. It resolves the caller's credential to a :class:`Principal`, applies the route's
rule from :mod:`runplane.auth.rules` under the deployment's mode, and leaves the principal
in ``g`` for :func:`current_principal` (and so ``current_caller()``).

Credentials, all as ``Authorization: Bearer <secret>`` (``?token=`` only where the rule
allows it): the operator admin token, an access token ``rpt_...``, a login session
``rps_...`` (database only). A login session may name another org of its user with the
``X-Runplane-Org`` header.

Modes (``RUNPLANE_AUTH``):

- ``off``: the anonymous caller may read and act (it sees every org, creates in
  ``org_default``); a presented credential is still checked and applied: an invalid one
  is 401, a real token lacking a scope is 403, admin and manage routes need their tier.
- ``required``: like off, but the anonymous caller is 401 on every non-public route.
- ``shadow``: decides like ``off`` and logs, at warning level, every request that
  ``required`` would have refused (route, principal, reason); it never refuses more than
  ``off`` does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from quart import Quart, g, has_request_context, has_websocket_context, request, websocket
from werkzeug.datastructures import Headers

from runplane.auth import identity, tokens
from runplane.auth.principal import ADMIN, InvalidCredential, Principal, anonymous
from runplane.auth.roles import MANAGER_ROLES
from runplane.auth.rules import UNLISTED, WEBSOCKET, Rule, rule_for
from runplane.http.context import services
from runplane.ids import secrets_equal
from runplane.problems import Problem, not_found

log = logging.getLogger("runplane.auth")

ORG_HEADER = "X-Runplane-Org"
_CHALLENGE = {"WWW-Authenticate": "Bearer"}
_unlisted_seen: set[str] = set()


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
    ``invalid`` is why a presented credential was refused (the principal is then anon);
    ``org_role`` is the principal's standing in the route's org (``org_manage`` rules)."""
    need = rule.need
    if need == "public":
        return None
    if need in ("admin", "operator"):
        if principal.superuser:
            return None
        if not admin_configured:
            return _unauthorized("admin routes need RUNPLANE_ADMIN_TOKEN to be set on the server")
        if need == "operator" and principal.authenticated:
            return Denial(
                403, "operator_token_required", "this route needs the operator admin token"
            )
        return _unauthorized("this route needs the operator admin token as a bearer")
    if invalid is not None:
        return _unauthorized(f"the bearer credential is not valid: {invalid}")
    if not principal.authenticated:
        if need in ("manage", "org_manage", "user_session"):
            return _unauthorized("this route needs a bearer credential")
        if mode == "required":
            return _unauthorized(
                "this server requires a bearer credential (RUNPLANE_AUTH=required)"
            )
        return None  # the anonymous caller of an open deploy is left alone
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


async def resolve(secret: str | None, *, org_id: str | None = None) -> Principal:
    """The principal a presented secret stands for (anonymous for None).
    InvalidCredential when it identifies nobody."""
    svc = services()
    settings = svc.settings
    if secret is None:
        return anonymous(sees_all=settings.auth != "required")
    admin = settings.admin_token
    if admin is not None and secrets_equal(secret, admin.get_secret_value()):
        return ADMIN
    if secret.startswith(tokens.TOKEN_PREFIX):
        return await tokens.verify_token(svc.store, secret)
    if secret.startswith(identity.SESSION_PREFIX):
        if not svc.store.supports_identity:
            raise InvalidCredential("session tokens need a database (identity is off)")
        return await identity.verify_session(svc.store, secret, org_id=org_id)
    if secret.startswith(identity.LOGIN_TOKEN_PREFIX):
        raise InvalidCredential(
            "a login token is not a bearer: exchange it at POST /v1/auth/token first"
        )
    raise InvalidCredential("not a token this server issued")


async def org_role(principal: Principal, org_id: str) -> str | None:
    """The principal's standing in ``org_id``: ``identity.SUPERUSER`` for the admin token,
    a login session's user's role there (live), an access token's role in its own org
    (``"none"`` for a token without a role); None outside the org."""
    if principal.superuser:
        return identity.SUPERUSER
    if principal.credential == "session":
        return await identity.member_role(services().store, org_id, principal.subject)
    if principal.authenticated and principal.org_id == org_id:
        return principal.role or "none"  # in the org, without a role: 403, not 404
    return None


def _bearer(headers: Headers) -> str | None:
    value = headers.get("Authorization", "")
    scheme, _, token = value.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return str(token.strip())


def _route_name(method: str, rule: str) -> str:
    return f"{method} {rule}"


async def _authenticate(*, is_websocket: bool) -> None:
    req = websocket if is_websocket else request
    url_rule = req.url_rule
    if url_rule is None:  # no route matched: let routing answer 404/405
        g.principal = anonymous(sees_all=services().settings.auth != "required")
        return
    method = WEBSOCKET if is_websocket else request.method
    if (
        not is_websocket
        and method == "OPTIONS"
        and getattr(url_rule, "provide_automatic_options", False)
    ):
        g.principal = anonymous(sees_all=True)
        return
    route = _route_name(method, url_rule.rule)
    rule = rule_for(method, url_rule.rule, websocket=is_websocket)
    svc = services()
    if rule is None:  # a bug tests/http/test_route_matrix.py reports; stay strict meanwhile
        if route not in _unlisted_seen:
            _unlisted_seen.add(route)
            log.error(
                "route has no auth rule: add it to RULES in runplane/auth/rules.py",
                extra={"route": route},
            )
        rule = UNLISTED
    if rule.identity and not svc.store.supports_identity:
        raise Problem(
            404,
            "identity_inactive",
            "users, orgs and login sessions need a database; this server runs with "
            "RUNPLANE_DATABASE_URL=memory",
        )
    secret = _bearer(req.headers)
    if secret is None and rule.query_token:
        secret = req.args.get("token") or None
    invalid: str | None = None
    try:
        principal = await resolve(secret, org_id=req.headers.get(ORG_HEADER) or None)
    except InvalidCredential as exc:
        invalid = exc.reason
        principal = anonymous(sees_all=svc.settings.auth != "required")
    g.principal = principal
    mode = svc.settings.auth
    standing = None
    if rule.need == "org_manage" and principal.authenticated:
        standing = await org_role(principal, str((req.view_args or {}).get("org_id", "")))
    admin_configured = svc.settings.admin_token is not None

    def under(as_mode: str) -> Denial | None:
        return decide(
            rule,
            principal,
            mode=as_mode,
            invalid=invalid,
            admin_configured=admin_configured,
            org_role=standing,
        )

    denial = under("off" if mode == "shadow" else mode)
    if denial is not None:
        raise denial.problem()
    if mode == "shadow":
        would = under("required")
        if would is not None:
            log.warning(
                "auth shadow: required mode would refuse this request",
                extra={
                    "route": route,
                    "path": req.path,
                    "principal": principal.describe(),
                    "reason": would.detail,
                    "status": would.status,
                },
            )


async def authenticate_request() -> None:
    await _authenticate(is_websocket=False)


async def authenticate_websocket() -> None:
    await _authenticate(is_websocket=True)


def current_principal() -> Principal:
    """The principal of the current request (the anonymous open-deploy caller outside a
    request, or before the hook ran)."""
    if (has_request_context() or has_websocket_context()) and "principal" in g:
        principal: Principal = g.principal
        return principal
    return anonymous(sees_all=True)


def install(app: Quart) -> None:
    """Put the auth layer in front of every route of ``app``."""
    app.before_request(authenticate_request)
    app.before_websocket(authenticate_websocket)
