"""The auth layer: one ``before_request`` (and ``before_websocket``) hook in front of every
route. It resolves the caller's credential to a :class:`Principal`, applies the matched
view's declared rule (its ``@doc(..., rule=...)``, a :class:`runplane.auth.rules.Rule`)
under the deployment's mode, and leaves the principal in ``g`` for
:func:`current_principal` (and so ``current_caller()``). A route that declares no rule
answers 500.

Credentials, all as ``Authorization: Bearer <secret>`` (``?token=`` only where the rule
allows it): the operator admin token, an access token ``rpt_...``, a login session
``rps_...`` (database only). A login session may name another org of its user with the
``X-Runplane-Org`` header. An ``Authorization`` header that is present but is not a valid
bearer (another scheme, an empty bearer, a secret this server did not issue) is a 401 in
every auth mode, on every route but those whose rule leaves the credential to the handler
(``Rule.reads_credential``: metrics, the git proxy, logout, the agents' WebSocket).

The decisions themselves (modes, tiers, scopes) are ``runplane/auth/access.py``, which
knows nothing of Quart; this module only reads the request and applies them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from quart import (
    Quart,
    current_app,
    g,
    has_request_context,
    has_websocket_context,
    request,
    websocket,
)

from runplane.auth import access, shares
from runplane.auth.access import Denial, decide
from runplane.auth.principal import NO_ORG, InvalidCredential, Principal, anonymous
from runplane.auth.rules import WEBSOCKET, Rule
from runplane.http.context import Services, services
from runplane.http.openapi.route_doc import doc_of
from runplane.http.ratelimit import limiter_of
from runplane.problems import Problem, not_found
from runplane.streams.tickets import looks_like_ticket

log = logging.getLogger("runplane.auth")

ORG_HEADER = "X-Runplane-Org"


#: Why an ``Authorization`` header that is not ``Bearer <secret>`` is refused (the header is
#: not echoed: a token sent without ``Bearer`` would be its first word).
NOT_BEARER = (
    "the Authorization header is not 'Bearer <token>' (another scheme, or a token sent "
    "without 'Bearer ')"
)
EMPTY_BEARER = "the Authorization header's bearer is empty"


def bearer_of(value: str | None) -> tuple[str | None, str | None]:
    """The secret of an ``Authorization: Bearer <secret>`` header's ``value``, and why a
    header that is present but not that is refused: (None, None) without one."""
    if value is None:
        return None, None
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer":
        return None, NOT_BEARER
    if not token.strip():
        return None, EMPTY_BEARER
    return str(token.strip()), None


async def _authenticate(*, is_websocket: bool) -> None:
    req = websocket if is_websocket else request
    url_rule = req.url_rule
    if url_rule is None:  # no route matched: let routing answer 404/405
        g.principal = anonymous(sees_all=services().settings.auth != "required")
        return
    method = WEBSOCKET if is_websocket else request.method
    if method == "OPTIONS" and getattr(url_rule, "provide_automatic_options", False):
        g.principal = anonymous(sees_all=True)
        return
    route = f"{method} {url_rule.rule}"
    rule = _declared_rule(url_rule.endpoint, route)
    if rule.identity and not services().store.supports_identity:
        raise Problem(
            404,
            "identity_inactive",
            "users, orgs and login sessions need a database; this server runs with "
            "RUNPLANE_DATABASE_URL=memory",
        )
    try:
        found = await _credential(req, rule)
    except Problem:  # a share code or embed token that is not valid: counted by address
        _count(url_rule.endpoint, anonymous(sees_all=False), is_websocket=is_websocket)
        raise
    if found is not None:
        g.principal = found[0]
    _count(url_rule.endpoint, g.principal, is_websocket=is_websocket)
    if found is None:  # a share grant or a stream ticket: decided already
        return
    principal, invalid = found
    await _decide(req, rule, principal, invalid, route)


def _count(endpoint: str, principal: Principal, *, is_websocket: bool) -> None:
    """Count the request against its rate limit (runplane/http/ratelimit.py): the 429
    comes before any 401 or 403. The agents' WebSocket is counted at its hello."""
    limiter = limiter_of(current_app.extensions)
    if limiter is not None and not is_websocket:
        limiter.check(endpoint, principal, request.remote_addr)


def _declared_rule(endpoint: str, route: str) -> Rule:
    """The matched view's declared rule (``@doc(..., rule=...)``); a route that declares
    none is a bug (the route matrix reports it too): 500, never let through."""
    declared = doc_of(current_app.view_functions.get(endpoint))
    if declared is None:
        log.error("route declares no auth rule", extra={"route": route})
        raise Problem(
            500,
            "undeclared_route",
            f"{route} declares no auth rule: give its view @doc(..., rule=...) "
            "(runplane/http/openapi/route_doc.py)",
        )
    return declared.rule


async def _credential(req: Any, rule: Rule) -> tuple[Principal, str | None] | None:
    """The request's principal and, for a credential that is not valid, why (an
    ``Authorization`` header that is not ``Bearer <secret>`` included). None when nothing
    is left to decide: a share grant authorizes a route its shares read, and a stream
    ticket stands in for the credential (the route verifies it)."""
    secret, malformed = bearer_of(req.headers.get("Authorization"))
    presented = _shared_token(req, secret, rule)
    shared: Principal | None = None
    if presented is not None:
        shared = await _shared_principal(rule, presented, req.view_args or {})
        if rule.shared:
            g.principal = shared
            return None  # the grant is the authorization: its job, its categories
    if rule.stream_ticket:
        bearer_ticket = secret if shared is None and looks_like_ticket(secret) else None
        ticket = req.args.get("ticket") or bearer_ticket
        if ticket:  # the route verifies it; nobody is authenticated here
            g.principal = anonymous(sees_all=False)
            g.stream_ticket = ticket
            return None
    if shared is not None:
        return shared, None  # elsewhere a share reads nothing: no org, no scope
    svc = services()
    if malformed is not None:
        return anonymous(sees_all=svc.settings.auth != "required"), malformed
    if secret is None and rule.query_token:
        secret = req.args.get("token") or None
    try:
        principal = await access.resolve(
            svc.settings, svc.store, secret, org_id=req.headers.get(ORG_HEADER) or None
        )
    except InvalidCredential as exc:
        return anonymous(sees_all=svc.settings.auth != "required"), exc.reason
    return principal, None


async def _decide(
    req: Any, rule: Rule, principal: Principal, invalid: str | None, route: str
) -> None:
    """Apply ``rule`` to ``principal`` under the deployment's mode: raise the refusal."""
    svc = services()
    standing = None
    if rule.need == "org_manage" and principal.authenticated:
        org_id = str((req.view_args or {}).get("org_id", ""))
        standing = await access.org_role(svc.store, principal, org_id)
    denial = verdict(svc, rule, principal, invalid, route, req.path, standing)
    if denial is not None:
        raise denial.problem()


def verdict(
    svc: Services,
    rule: Rule,
    principal: Principal,
    invalid: str | None,
    route: str,
    path: str,
    standing: str | None = None,
) -> Denial | None:
    """``rule`` applied to ``principal`` under the deployment's mode: the refusal, or None
    (``shadow``: logs what ``required`` would have refused). ``standing``: the
    principal's role in the org a ``org_manage`` route names."""
    mode = svc.settings.auth
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
        return denial
    if mode == "shadow":
        would = under("required")
        if would is not None:
            log.warning(
                "auth shadow: required mode would refuse this request",
                extra={
                    "route": route,
                    "path": path,
                    "principal": principal.describe(),
                    "reason": would.detail,
                    "status": would.status,
                },
            )
    return None


async def plain_principal(
    svc: Services, rule: Rule, headers: Mapping[str, str]
) -> Principal | None:
    """The principal of a request (``headers`` by lower-case name, the first of each)
    with a plain credential: none, the admin token, an access token or a login session,
    valid, on a route whose rule needs nothing else read (no share grant, stream ticket,
    identity or org standing). None when the request is not that: the hook above then
    decides it (the lean lanes hand it to Quart, docs/lean-lanes.md)."""
    if rule.identity or rule.shared or rule.stream_ticket or rule.reads_credential:
        return None
    if rule.need == "org_manage" or rule.query_token:
        return None
    secret, malformed = bearer_of(headers.get("authorization"))
    if malformed is not None or "x-share-token" in headers or "x-embed-token" in headers:
        return None
    if secret is not None and shares.kind_of(secret):
        return None
    org_id = headers.get(ORG_HEADER.lower()) or None
    try:
        return await access.resolve(svc.settings, svc.store, secret, org_id=org_id)
    except InvalidCredential:
        return None


def _shared_token(req: Any, secret: str | None, rule: Rule) -> str | None:
    """A share code or embed token presented with the request, if any: in a header or
    as the bearer anywhere, as ``?share=``/``?embed=`` only where shares read the route
    (``POST /v1/runs?embed=1`` is a flag, not a token)."""
    query = rule.shared
    for found in (
        req.args.get("share") if query else None,
        req.headers.get("X-Share-Token"),
        req.args.get("embed") if query else None,
        req.headers.get("X-Embed-Token"),
        secret if secret is not None and shares.kind_of(secret) else None,
    ):
        if found:
            return str(found)
    return None


async def _shared_principal(rule: Rule, token: str, view_args: dict[str, Any]) -> Principal:
    """The read-only principal of a share code or embed token. On a route that lets
    shares read its job, it reads that job's org, for that job and the allowed
    categories only; anywhere else it reads nothing and holds no scope. 401 for a token
    that is not live (fail closed); the 404 of an unknown job for another job."""
    svc = services()
    try:
        grant = await shares.verify(svc.store, svc.settings.secret_key_bytes(), token)
    except shares.Refused as exc:
        raise Problem(
            401,
            "invalid_token",
            f"this share link or embed token is not valid ({exc}); ask its owner for a new one",
            headers={"WWW-Authenticate": "Bearer"},
        ) from None
    reads = NO_ORG
    if rule.shared:
        if view_args.get("job_id") != grant.job_id:
            raise not_found("job")
        if not any(grant.allows(c) for c in rule.shared):
            raise Problem(
                401,
                "not_allowed",
                f"this {grant.kind} grant does not allow {' or '.join(rule.shared)}",
                headers={"WWW-Authenticate": "Bearer"},
            )
        reads = grant.org_id
    return Principal(
        kind="anon",
        subject=f"{grant.kind}:{grant.id}",
        org_id=grant.org_id,
        read_org=reads,
        name=f"{grant.kind} link",
        credential="share" if grant.kind == "share" else "embed",
        credential_id=grant.id,
    )


async def authenticate_request() -> None:
    await _authenticate(is_websocket=False)


async def authenticate_websocket() -> None:
    await _authenticate(is_websocket=True)


def current_ticket() -> str | None:
    """The stream ticket the request came with (routes whose rule allows one)."""
    if has_request_context() and "stream_ticket" in g:
        ticket: str = g.stream_ticket
        return ticket
    return None


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
