"""``/v1/secrets``: an org's secrets, referenced from job env values as ``${secrets.NAME}``
(docs/secrets.md). Manage tier: an org owner/admin for its own org; the admin token names
the org with ``?org=``. Values go in and never come out."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane import vault
from runplane.auth.rules import MANAGE
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller, write_org
from runplane.http.context import services
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, str_arg
from runplane.problems import not_found

blueprint = Blueprint("secrets", __name__, url_prefix="/v1/secrets")


@blueprint.put("/<name>")
@accepts_query("org")
@doc(
    "Set an org secret (sealed at rest)",
    v.SecretView,
    status=201,
    also=(200,),
    body=vault.SecretBody,
    path={"name": vault.NAME_PATTERN},
    rule=MANAGE,
)
async def put_secret(name: str) -> tuple[dict[str, Any], int]:
    vault.check_name(name)
    body = await parse_body(vault.SecretBody)
    org = write_org("secret")
    info, created = await services().root.accounts.put_secret(
        org, name, body.value, current_caller().subject
    )
    # the audit row names the secret, never its value
    await audit.record("secrets:put", "secret", name, org_id=org, after=info.view())
    return info.view(), 201 if created else 200


@blueprint.get("")
@accepts_query("org")
@doc("Org secrets: names and times, never values", v.SecretView, many=True, rule=MANAGE)
async def list_secrets() -> list[dict[str, Any]]:
    caller = current_caller()
    org = str_arg("org") if caller.read_org is None else caller.read_org
    return [s.view() for s in await services().root.accounts.secrets(org)]


@blueprint.delete("/<name>")
@accepts_query("org")
@doc(
    "Delete an org secret",
    status=204,
    content="empty",
    path={"name": vault.NAME_PATTERN},
    rule=MANAGE,
)
async def delete_secret(name: str) -> tuple[str, int]:
    org = write_org("secret")
    if not await services().root.accounts.delete_secret(org, name):
        raise not_found("secret")
    await audit.record("secrets:delete", "secret", name, org_id=org)
    return "", 204
