"""Who am I, roles, access tokens, and login sessions (``/v1/auth/*``, ``/v1/roles``).

Access requirements live in the rule table (``runplane/auth/rules.py``); these handlers
only parse, call ``runplane.auth`` and render. See docs/auth.md.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import StringConstraints
from quart import Blueprint, Response, request

from runplane.auth import identity, tokens
from runplane.auth.principal import DEFAULT_ORG, InvalidCredential
from runplane.auth.roles import ROLE_NAMES, normalize_scopes, role_catalog
from runplane.auth.rules import ADMIN, PUBLIC, Rule
from runplane.http import audit
from runplane.http.auth_hook import current_principal
from runplane.http.bodies import Body, parse_body
from runplane.http.context import services
from runplane.http.guards import bearer_token
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, pattern
from runplane.http.routes.orgs import Email
from runplane.ids import ORG_ID_PATTERN
from runplane.problems import FieldProblem, Problem, not_found

blueprint = Blueprint("auth", __name__)

#: Answers that carry a secret: no cache may keep them.
NO_STORE = {"Cache-Control": "no-store"}

OrgId = Annotated[str, StringConstraints(pattern=ORG_ID_PATTERN)]
Subject = Annotated[
    str, StringConstraints(strip_whitespace=True, min_length=1, max_length=tokens.SUBJECT_MAX)
]
Name = Annotated[str, StringConstraints(strip_whitespace=True, max_length=tokens.NAME_MAX)]


def _invalid(key: str, code: str, message: str) -> Problem:
    return Problem(400, code, message, [FieldProblem(key, code, message)])


@blueprint.get("/v1/auth/whoami")
@doc("The caller's principal", v.Principal, rule=PUBLIC)
async def whoami() -> dict[str, Any]:
    return current_principal().view()


@blueprint.get("/v1/roles")
@doc("The roles and their scopes", v.Role, many=True, rule=PUBLIC)
async def roles() -> list[dict[str, object]]:
    return role_catalog()


class MintBody(Body):
    subject: Subject
    kind: Literal["user", "service"] = "user"
    org_id: OrgId | None = None
    name: Name = ""
    role: str | None = None
    scopes: list[str] | None = None


@blueprint.post("/v1/auth/tokens")
@doc("Mint an API token (shown once)", v.MintResult, status=201, body=MintBody, rule=ADMIN)
async def mint_token() -> tuple[dict[str, Any], int, dict[str, str]]:
    body = await parse_body(MintBody)
    if body.role is not None and body.scopes is not None:
        raise _invalid("role", "role_and_scopes", "give either a role or explicit scopes, not both")
    if body.role is not None and body.role not in ROLE_NAMES:
        message = f"unknown role {body.role!r}; accepted: {', '.join(ROLE_NAMES)}"
        raise _invalid("role", "unknown_role", message)
    if body.scopes is not None:
        try:
            normalize_scopes(body.scopes)
        except ValueError as exc:
            raise _invalid("scopes", "unknown_scope", str(exc)) from None
    try:
        view, secret = await services().root.accounts.mint_token(
            subject=body.subject,
            kind=body.kind,
            org_id=body.org_id or DEFAULT_ORG,
            name=body.name,
            role=body.role,
            scopes=body.scopes,
        )
    except ValueError as exc:  # the checks above cover what the body model does not
        raise Problem(400, "invalid", str(exc)) from None
    await audit.record("tokens:mint", "token", view.id, org_id=view.org_id, after=view)
    return tokens.MintResult.of(view, secret).model_dump(), 201, NO_STORE


@blueprint.get("/v1/auth/tokens")
@accepts_query(pattern("org_id", ORG_ID_PATTERN))
@doc("API tokens (no secrets)", v.TokenView, many=True, rule=ADMIN)
async def list_tokens() -> list[dict[str, Any]]:
    org_id = request.args.get("org_id") or None
    views = await services().root.accounts.tokens(org_id)
    return [view.model_dump() for view in views]


@blueprint.delete("/v1/auth/tokens/<token_id>")
@doc("Revoke an API token", v.Deleted, rule=ADMIN)
async def revoke_token(token_id: str) -> dict[str, str]:
    if not await services().root.accounts.revoke_token(token_id):
        raise not_found("token")
    await audit.record("tokens:revoke", "token", token_id)
    return {"revoked": token_id}


class ExchangeBody(Body):
    token: Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


@blueprint.post("/v1/auth/token")
@doc(
    "Exchange a login token for a session",
    v.SessionResult,
    body=ExchangeBody,
    errors=(401,),
    rule=Rule("public", identity=True),
)
async def exchange() -> tuple[dict[str, Any], int, dict[str, str]]:
    body = await parse_body(ExchangeBody)
    try:
        granted = await services().root.accounts.exchange(body.token)
    except InvalidCredential as exc:
        raise Problem(
            401,
            "unauthorized",
            f"the login token is not valid: {exc.reason}",
            headers={"WWW-Authenticate": "Bearer"},
        ) from None
    return granted.result(), 200, NO_STORE


@blueprint.post("/v1/auth/logout")
@doc(
    "End the bearer's login session",
    status=204,
    content="empty",
    errors=(401,),
    # ends the bearer's session: it reads the bearer itself (an ended one is 204 too)
    rule=Rule("public", identity=True, reads_credential=True),
)
async def logout() -> Response:
    secret = bearer_token()
    if secret is not None and secret.startswith(identity.SESSION_PREFIX):
        await services().root.accounts.logout(secret)
    return Response(b"", status=204)


class SeatBody(Body):
    name: Name | None = None
    email: Email


@blueprint.post("/v1/auth/seat")
@doc(
    "Seat a user in an org (a login token, shown once)",
    v.Seated,
    status=201,
    body=SeatBody,
    errors=(409,),
    rule=Rule("operator", identity=True),
)
async def seat() -> tuple[dict[str, Any], int, dict[str, str]]:
    body = await parse_body(SeatBody)
    seated = await services().root.accounts.seat(name=body.name, email=body.email)
    if seated.created:
        await audit.record(
            "users:seat", "user", seated.user.id, org_id=seated.org_id, after=seated.user
        )
        note = identity.LOGIN_NOTE
    else:
        note = "this email already has an account: nothing was created and no login token issued"
    result = {
        "user": seated.user.model_dump(),
        "org_id": seated.org_id,
        "login_token": seated.login_token,
        "note": note,
    }
    return result, 201, NO_STORE
