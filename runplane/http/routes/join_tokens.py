"""Node join tokens under ``/v1/nodes/join-tokens`` (admin token). See docs/enrollment.md."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import StringConstraints
from quart import Blueprint, request

from runplane.auth.rules import ADMIN
from runplane.http import audit
from runplane.http.bodies import Body, parse_body
from runplane.http.context import services
from runplane.http.guards import require_admin, require_area
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, pattern
from runplane.ids import ORG_ID_PATTERN, valid_org_id
from runplane.nodes import enrollment
from runplane.problems import FieldProblem, Problem, not_found

blueprint = Blueprint("join_tokens", __name__, url_prefix="/v1/nodes/join-tokens")

OrgId = Annotated[str, StringConstraints(pattern=ORG_ID_PATTERN)]
Label = Annotated[str, StringConstraints(strip_whitespace=True, max_length=enrollment.LABEL_MAX)]

#: The mint answer carries a secret: no cache may keep it.
NO_STORE = {"Cache-Control": "no-store"}


class JoinTokenMintBody(Body):
    """Every field optional; an absent or empty body mints a community token for org_default.

    ``tier`` takes any JSON value: one that is not a tier becomes ``community`` (spec).
    """

    tier: Any = None
    org_id: OrgId | None = None
    label: Label | None = None


async def _mint_body() -> JoinTokenMintBody:
    raw = await request.get_data(as_text=False)
    if not raw.strip():
        return JoinTokenMintBody()
    return await parse_body(JoinTokenMintBody)


@blueprint.post("")
@doc(
    "Mint a node join token (shown once)",
    v.JoinTokenMint,
    status=201,
    body=JoinTokenMintBody,
    body_optional=True,
    rule=ADMIN,
)
async def mint() -> tuple[dict[str, Any], int, dict[str, str]]:
    require_admin()
    svc = services()
    require_area("enrollment", "node enrollment")
    body = await _mint_body()
    asked = body.tier
    tier = enrollment.coerce_tier(asked)
    exact = isinstance(asked, str) and asked.strip().lower() == tier
    extra_note = ""
    if asked is not None and not exact:
        extra_note = (
            f"tier {body.tier!r} is not one of {', '.join(enrollment.TIERS)}; minted as {tier}."
        )
    try:
        view, secret = await svc.root.fleet.mint_join_token(
            tier=tier,
            org_id=body.org_id or enrollment.DEFAULT_ORG,
            label=body.label or "",
        )
    except ValueError as exc:  # the body model already checks the same rules
        raise Problem(400, "invalid", str(exc)) from None
    await audit.record("join_tokens:mint", "join_token", view.id, org_id=view.org_id, after=view)
    result = enrollment.JoinTokenMint.of(view, secret, extra_note=extra_note)
    return result.model_dump(), 201, NO_STORE


@blueprint.get("")
@accepts_query(pattern("org_id", ORG_ID_PATTERN))
@doc("Node join tokens (no secrets)", v.JoinTokenView, many=True, rule=ADMIN)
async def list_tokens() -> list[dict[str, Any]]:
    require_admin()
    org_id = request.args.get("org_id") or None
    if org_id is not None and not valid_org_id(org_id):
        message = f"org_id {org_id!r} is not an org id (org_ + [a-z0-9_-], at most 64)"
        raise Problem(400, "invalid_query", message, [FieldProblem("org_id", "invalid", message)])
    views = await services().root.fleet.join_tokens(org_id)
    return [view.model_dump() for view in views]


@blueprint.delete("/<token_id>")
@doc("Revoke a node join token", v.Deleted, rule=ADMIN)
async def revoke(token_id: str) -> dict[str, str]:
    require_admin()
    if not await services().root.fleet.revoke_join_token(token_id):
        raise not_found("join token")
    await audit.record("join_tokens:revoke", "join_token", token_id)
    return {"revoked": token_id}
