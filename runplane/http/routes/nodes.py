"""``GET /v1/nodes``: the fleet, as a bare list or a NodePage (keyset on node id)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.query import accepts_query, flag_arg, int_arg
from runplane.jobs.repo import decode_cursor, encode_cursor

blueprint = Blueprint("nodes", __name__, url_prefix="/v1/nodes")

PAGE_DEFAULT, PAGE_MAX = 50, 200


@blueprint.get("")
@accepts_query("paginate", "cursor", "limit")
async def list_nodes() -> Any:
    fleet = services().root.fleet
    org = current_caller().read_org
    cursor = request.args.get("cursor")
    if not (flag_arg("paginate") or cursor):
        return await fleet.views(org_id=org)
    limit = int_arg("limit", PAGE_DEFAULT, minimum=1, maximum=PAGE_MAX)
    after = decode_cursor(cursor) if cursor else None
    views = await fleet.views(after=after, limit=limit + 1, org_id=org)
    has_more = len(views) > limit
    views = views[:limit]
    return {
        "items": views,
        "next_cursor": encode_cursor(views[-1]["id"]) if has_more else "",
        "has_more": has_more,
    }
