"""``GET /v1/nodes``: the fleet, as a bare list or a NodePage (keyset on node id); and the
cross-org node grants (``runplane/nodes/grants.py``)."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, request

from runplane.actors import channels
from runplane.auth.rules import MANAGE, OPERATOR, READ, scope
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.guards import require_area
from runplane.http.mcp.tools import NoArgs, Tool
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import (
    accepts_query,
    boolean,
    flag_arg,
    int_arg,
    integer,
    pattern,
    text,
)
from runplane.nodes import grants, metrics, patch

blueprint = Blueprint("nodes", __name__, url_prefix="/v1/nodes")

PAGE_DEFAULT, PAGE_MAX = 50, 200
#: A metrics window (runplane/timefmt.py ``duration_ms``) of at most 24 h.
WINDOW_PATTERN = (
    r"^(([1-9][0-9]{0,2}|1[0-3][0-9]{2}|14[0-3][0-9]|1440)m|([1-9]|1[0-9]|2[0-4])h|1d)$"
)


@blueprint.get("")
@accepts_query(
    boolean("paginate", description="1 or true: the page envelope instead of the bare array"),
    text("cursor", description="next_cursor of the previous page (implies paginate)"),
    integer("limit", minimum=1, maximum=PAGE_MAX),
)
@doc(
    "The fleet",
    v.Node,
    many=True,
    page=v.NodePage,
    rule=READ,
    mcp=Tool(
        "get_nodes",
        "List nodes",
        "The fleet: each node's status, capacity, committed load and running jobs.",
        NoArgs,
    ),
)
async def list_nodes() -> Any:
    fleet = services().root.fleet
    org = current_caller().read_org
    cursor = request.args.get("cursor")
    if not (flag_arg("paginate") or cursor):
        return await fleet.views(org_id=org)
    limit = int_arg("limit", PAGE_DEFAULT, minimum=1, maximum=PAGE_MAX)
    return await fleet.view_page(cursor, limit, org)


@blueprint.post("/grants")
@doc(
    "Grant another org use of nodes",
    v.NodeGrantView,
    status=201,
    body=grants.GrantBody,
    errors=(404, 409),  # 404: an owner or grantee org that does not exist
    # cross-org node grants (docs/placement.md): owners/admins hold nodes:grant (via *);
    # the routes narrow a non-superuser to grants of its own org
    rule=scope("nodes:grant"),
)
async def grant() -> tuple[dict[str, Any], int]:
    require_area("node_sharing", "node sharing")
    body = await parse_body(grants.GrantBody)
    caller = current_caller()
    made = await services().root.fleet.grant(
        body,
        caller_org=caller.org_id,
        superuser=caller.superuser,
        created_by=caller.subject,
    )
    await services().root.grants_changed()
    view = made.view()
    await audit.record("nodes:grant", "node_grant", made.id, org_id=made.owner_org, after=view)
    return view, 201


@blueprint.get("/grants")
@doc("Node grants", v.NodeGrantList, rule=READ)
async def list_grants() -> dict[str, Any]:
    require_area("node_sharing", "node sharing")
    return await services().root.fleet.grant_list(current_caller().read_org)


@blueprint.delete("/grants/<grant_id>")
@doc("Revoke a node grant", status=204, content="empty", rule=scope("nodes:grant"))
async def revoke_grant(grant_id: str) -> tuple[str, int]:
    require_area("node_sharing", "node sharing")
    gone = await services().root.fleet.revoke_grant(grant_id, current_caller().read_org)
    await services().root.grants_changed()
    await audit.record(
        "nodes:revoke_grant", "node_grant", grant_id, org_id=gone.owner_org, after=gone.view()
    )
    return "", 204


@blueprint.patch("/<node_id>")
@doc(
    "Change a node's name, caps or disabled flag",
    v.NodePatchResult,
    body=patch.NodePatch,
    # overrides: the admin token or an owner/admin of the owning org (the route: a node of
    # another org is 404, one no org owns 403 to everybody but the admin token)
    rule=MANAGE,
)
async def patch_node(node_id: str) -> dict[str, Any]:
    """Overrides (docs/placement.md): the admin token, or an owner/admin of the org that
    owns the node; a node no org owns is the admin token's only."""
    body = await parse_body(patch.NodePatch)
    caller = current_caller()
    result = await services().root.fleet.patch_node(
        node_id, body, None if caller.superuser else caller.org_id
    )
    await audit.record(
        "nodes:patch", "node", node_id, after={**body.model_dump(exclude_unset=True), **result}
    )
    return result


@blueprint.get("/<node_id>/metrics")
@accepts_query(pattern("window", WINDOW_PATTERN, description="15m, 1h: at most 24h"))
@doc("A node's load samples over a window", v.NodeMetrics, rule=READ)
async def node_metrics(node_id: str) -> dict[str, Any]:
    """The node's sampled load (docs/placement.md#node-metrics); nodes are a shared fleet:
    visible to every caller that may list them."""
    window = request.args.get("window") or metrics.DEFAULT_WINDOW
    return await services().root.fleet.node_metrics(node_id, window)


@blueprint.post("/<node_id>/update")
@doc(
    "Ask a node's agent to update itself",
    v.NodeUpdateResult,
    also=(202,),
    errors=(409,),
    # self-update: fleet-wide operator control (spec: the admin token; 403 for a known
    # caller who is not the operator)
    rule=OPERATOR,
)
async def update_node(node_id: str) -> tuple[dict[str, Any], int]:
    """Self-update to the node's channel target (docs/agent.md#self-update): 200 when the
    signal reached the connected agent, 202 when it takes it at its next connect."""
    root = services().root
    targets = await channels.get_targets(root.channels)
    result, status = await root.fleet.request_update(node_id, targets)
    await audit.record("nodes:update", "node", node_id, after=result)
    return result, status
