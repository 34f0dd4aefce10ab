"""Orgs and members (``/v1/orgs``; database identity only). See docs/auth.md.

Who may call is in the rule table (``runplane/auth/rules.py``): creating and listing orgs
needs a user's login session; member routes need the admin token or an owner/admin of the
org in the path (another org's id is the same 404 as an unknown one).
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import StringConstraints
from quart import Blueprint, Response

from runplane.auth import identity
from runplane.auth.roles import RoleName
from runplane.auth.rules import Rule
from runplane.http import audit
from runplane.http.auth_hook import current_principal
from runplane.http.bodies import Body, parse_body
from runplane.http.context import services
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.problems import not_found

blueprint = Blueprint("orgs", __name__, url_prefix="/v1/orgs")

NO_STORE = {"Cache-Control": "no-store"}

#: What Python's str.isspace() calls whitespace (``\s`` differs between Python, the
#: JSON Schema dialect and pydantic's regex engine, so the class is spelled out).
_SPACE = r"\t-\r \u001c-\u001f\u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
#: An email as runplane/auth/identity.py normalize_email takes one: name@host, no spaces.
Email = Annotated[
    str,
    StringConstraints(max_length=identity.EMAIL_MAX, pattern=rf"^[^@{_SPACE}]+@[^@{_SPACE}]+$"),
]
Text = Annotated[str, StringConstraints(strip_whitespace=True, max_length=identity.NAME_MAX)]


class OrgBody(Body):
    name: Text
    slug: Text | None = None


@blueprint.post("")
@doc(
    "Create a team org",
    v.Org,
    status=201,
    body=OrgBody,
    errors=(409,),
    rule=Rule("user_session", identity=True),
)
async def create_org() -> tuple[dict[str, Any], int]:
    body = await parse_body(OrgBody)
    principal = current_principal()
    org = await services().root.accounts.create_org(
        user_id=principal.subject, name=body.name, slug=body.slug
    )
    await audit.record("orgs:create", "org", org.id, org_id=org.id, after=org)
    return org.model_dump(), 201


@blueprint.get("")
@doc("The caller's orgs", v.OrgMembership, many=True, rule=Rule("user_session", identity=True))
async def list_orgs() -> list[dict[str, Any]]:
    return await services().root.accounts.memberships(current_principal().subject)


async def _granter(org_id: str) -> str:
    """The caller's standing in ``org_id`` (the auth layer already required owner/admin
    there, or the admin token): what the role rules of identity.py check against."""
    standing = await services().root.accounts.org_role(current_principal(), org_id)
    if standing is None:  # not reached behind the auth layer; same 404 as an unknown org
        raise not_found("org")
    return standing


class MemberBody(Body):
    name: Text | None = None
    email: Email
    role: RoleName = "member"


@blueprint.post("/<org_id>/members")
@doc(
    "Add a member to an org",
    v.MemberAdded,
    status=201,
    body=MemberBody,
    errors=(409,),
    rule=Rule("org_manage", identity=True),
)
async def add_member(org_id: str) -> tuple[dict[str, Any], int, dict[str, str]]:
    granter = await _granter(org_id)
    body = await parse_body(MemberBody)
    added = await services().root.accounts.add_member(
        org_id,
        name=body.name,
        email=body.email,
        role=body.role,
        granter=granter,
    )
    if added.changed:
        await audit.record(
            "members:add",
            "user",
            added.user.id,
            org_id=org_id,
            after={"user_id": added.user.id, "role": added.role},
        )
    if added.created:
        note = identity.LOGIN_NOTE
    elif added.changed:
        note = "existing account: membership set, no login token issued"
    else:
        note = "already a member with this role: nothing changed"
    result = {
        "user": added.user.model_dump(),
        "role": added.role,
        "login_token": added.login_token,
        "note": note,
    }
    return result, 201, NO_STORE


@blueprint.get("/<org_id>/members")
@doc("An org's members", v.OrgMember, many=True, rule=Rule("org_manage", identity=True))
async def list_members(org_id: str) -> list[dict[str, Any]]:
    await _granter(org_id)
    return await services().root.accounts.members(org_id)


@blueprint.delete("/<org_id>/members/<user_id>")
@doc(
    "Remove a member from an org",
    status=204,
    content="empty",
    errors=(409,),
    rule=Rule("org_manage", identity=True),
)
async def remove_member(org_id: str, user_id: str) -> Response:
    granter = await _granter(org_id)
    role = await services().root.accounts.remove_member(org_id, user_id, granter=granter)
    await audit.record("members:remove", "user", user_id, org_id=org_id, after={"role": role})
    return Response(b"", status=204)
