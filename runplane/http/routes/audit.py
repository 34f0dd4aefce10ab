"""``GET /v1/admin/audit``: the audit trail, newest first (Manage tier). See docs/auth.md.

The admin token sees every org (or one with ``?org=``); an org owner/admin is silently
narrowed to its own org. ``limit`` defaults to 100 (at most 1000). Without a database the
list is empty (spec).
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane.auth import audit
from runplane.auth.rules import MANAGE
from runplane.http.auth_hook import current_principal
from runplane.http.context import services
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, int_arg, integer, str_arg

blueprint = Blueprint("audit", __name__, url_prefix="/v1/admin")


@blueprint.get("/audit")
@accepts_query(integer("limit", minimum=1, maximum=audit.LIST_MAX), "org")
@doc("The audit trail", v.AuditRow, many=True, rule=MANAGE)
async def list_audit() -> list[dict[str, Any]]:
    principal = current_principal()
    limit = int_arg("limit", audit.LIST_DEFAULT, minimum=1, maximum=audit.LIST_MAX)
    org_id = str_arg("org") if principal.superuser else principal.org_id
    return await services().root.accounts.audit_rows(org_id=org_id, limit=limit)
