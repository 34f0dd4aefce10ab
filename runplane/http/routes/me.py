"""``GET /v1/me/entitlements``: the caller's concurrency quotas and what is left of them.

Limits are the caller's admission ceilings (platform caps refined by its org's policy for
its user id); usage comes from the admission ledger, the counts admission decides by.
``remaining.org_concurrent`` is omitted when the org has no cap (0), like
``remaining.user_concurrent`` when no per-user cap is set (spec).
"""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane.actors import admission as adm
from runplane.auth.rules import READ
from runplane.http.auth_hook import current_principal
from runplane.http.context import services
from runplane.http.mcp.tools import NoArgs, Tool
from runplane.http.openapi import doc
from runplane.http.openapi import views as v

blueprint = Blueprint("me", __name__, url_prefix="/v1/me")


@blueprint.get("/entitlements")
@doc(
    "The caller's usage, limits and what remains",
    v.Entitlements,
    rule=READ,
    mcp=Tool(
        "entitlements",
        "My entitlements",
        "Who the caller is, its org's usage and limits, and what remains.",
        NoArgs,
    ),
)
async def entitlements() -> dict[str, Any]:
    principal = current_principal()
    usage = await adm.usage(services().root.admission, principal.org_id, principal.subject)
    org_limit = usage.caps["max_concurrent_org"]
    user_limit = usage.caps["max_concurrent_user"]
    remaining: dict[str, int] = {}
    if org_limit:
        remaining["org_concurrent"] = max(0, org_limit - usage.queued - usage.on_node)
    if user_limit:
        remaining["user_concurrent"] = max(0, user_limit - usage.user_inflight)
    return {
        "principal": principal.view(),
        "org": principal.org_id,
        "usage": {
            "running": usage.on_node,
            "queued": usage.queued,
            "user_inflight": usage.user_inflight,
        },
        "limits": {"max_concurrent_org": org_limit, "max_concurrent_user": user_limit},
        "remaining": remaining,
    }
