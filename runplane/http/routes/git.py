"""``/v1/git/connections``: an org's git connections (docs/git.md). 503 with
``RUNPLANE_DISABLE=git``."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane.git.connections import GitConnectionBody
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.guards import require_area
from runplane.http.query import accepts_query, str_arg

blueprint = Blueprint("git", __name__, url_prefix="/v1/git")

NOTE = (
    "the secret is sealed and never shown again; jobs use the connection as a workspace "
    "{type: git, connection_id, ref}"
)
KEY_NOTE = (
    "add ssh_pub (shown only now) to the repository's deploy keys; the private half is "
    "kept sealed on the server"
)


@blueprint.post("/connections")
async def create_connection() -> tuple[dict[str, Any], int]:
    require_area("git", "git integration")
    body = await parse_body(GitConnectionBody)
    caller = current_caller()
    conn = await services().root.git.create(body, org_id=caller.org_id, created_by=caller.subject)
    view = conn.view(created=True, note=KEY_NOTE if conn.ssh_pub else NOTE)
    await audit.record(
        "git:connect", "git_connection", conn.id, org_id=conn.org_id, after=conn.view()
    )
    return view, 201


@blueprint.get("/connections")
@accepts_query("org")
async def list_connections() -> list[dict[str, Any]]:
    require_area("git", "git integration")
    caller = current_caller()
    org = str_arg("org") if caller.read_org is None else caller.read_org
    return [c.view() for c in await services().root.git.listing(org)]
