"""``/v1/registries``: an org's container registry credentials, used to resolve its jobs'
images at submit and handed to a node for one attempt's pull (docs/containers.md
"Registry credentials"). Manage tier: an org owner/admin for its own org; the admin token
names the org with ``?org=``. Passwords go in and never come out."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane.auth.rules import MANAGE
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller, write_org
from runplane.http.context import services
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, str_arg
from runplane.images.credentials import RegistryCredentialBody

blueprint = Blueprint("registries", __name__, url_prefix="/v1/registries")


@blueprint.post("")
@accepts_query("org")
@doc(
    "Add a registry credential (the password sealed, never shown)",
    v.RegistryCredentialView,
    status=201,
    body=RegistryCredentialBody,
    errors=(409,),
    rule=MANAGE,
)
async def create_credential() -> tuple[dict[str, Any], int]:
    body = await parse_body(RegistryCredentialBody)
    org = write_org("credential")
    cred = await services().root.images.create_credential(
        body, org_id=org, created_by=current_caller().subject
    )
    # the audit row names the registry and the user, never the password
    await audit.record(
        "registries:create", "registry_credential", cred.id, org_id=org, after=cred.view()
    )
    return cred.view(), 201


@blueprint.get("")
@accepts_query("org")
@doc("Registry credentials (no passwords)", v.RegistryCredentialView, many=True, rule=MANAGE)
async def list_credentials() -> list[dict[str, Any]]:
    caller = current_caller()
    org = str_arg("org") if caller.read_org is None else caller.read_org
    return [c.view() for c in await services().root.images.credentials(org)]


@blueprint.delete("/<credential_id>")
@doc("Delete a registry credential", status=204, content="empty", rule=MANAGE)
async def delete_credential(credential_id: str) -> tuple[str, int]:
    caller = current_caller()
    org = None if caller.superuser else caller.org_id
    cred = await services().root.images.delete_credential(credential_id, org)
    await audit.record("registries:delete", "registry_credential", cred.id, org_id=cred.org_id)
    return "", 204
