"""``/v1/git/connections``: an org's git connections, and ``/v1/git/proxy``: the
repositories of connections served to agents cloning them for a job, with a ticket of the
attempt (docs/git.md). 503 with ``RUNPLANE_DISABLE=git``."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, Response, request

from runplane.auth.rules import OWN_CREDENTIAL, scope
from runplane.git.connections import GitConnectionBody
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.guards import require_area
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.openapi.route_doc import RawBody
from runplane.http.query import accepts_query, choice, str_arg
from runplane.problems import Problem

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
@doc(
    "Connect a git repository",
    v.GitConnectionView,
    status=201,
    body=GitConnectionBody,
    errors=(502,),
    rule=scope("git:connect"),
)
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
@doc("Git connections (no secrets)", v.GitConnectionView, many=True, rule=scope("git:read"))
async def list_connections() -> list[dict[str, Any]]:
    require_area("git", "git integration")
    caller = current_caller()
    org = str_arg("org") if caller.read_org is None else caller.read_org
    return [c.view() for c in await services().root.git.listing(org)]


#: Request headers of a git client worth passing on (the rest are hop-by-hop or ours).
FORWARDED = ("content-type", "content-encoding", "accept", "git-protocol")
#: An upload-pack request (the client's wants and haves) is small; a bigger one is refused.
MAX_UPLOAD_PACK_REQUEST = 16 * 1024 * 1024


async def _proxy(connection_id: str, service_path: str) -> Response:
    require_area("git", "git integration")
    length = request.content_length or 0
    if length > MAX_UPLOAD_PACK_REQUEST:
        raise Problem(
            413,
            "too_large",
            f"an upload-pack request is at most {MAX_UPLOAD_PACK_REQUEST} bytes",
        )
    raw = await request.get_data(as_text=False) if request.method == "POST" else b""
    body = raw if isinstance(raw, bytes) else raw.encode()
    headers = [(k, v) for k, v in request.headers.items() if k.lower() in FORWARDED]
    upstream = await services().root.git.proxy(
        connection_id,
        request.headers.get("Authorization"),
        service_path,
        method=request.method,
        query=request.query_string.decode("latin-1"),
        headers=headers,
        body=body,
    )

    async def relay() -> Any:
        try:
            async for chunk in upstream.chunks():
                yield chunk
        finally:
            await upstream.aclose()

    passed = {
        k: v
        for k, v in upstream.headers.items()
        if k in ("content-type", "content-encoding", "cache-control")
    }
    return Response(relay(), status=upstream.status, headers=passed)


# (the run orders point agents here: runplane/jobs/orders.py GIT_PROXY)
@blueprint.get("/proxy/<connection_id>/info/refs")
# git asks for either service; pushes (receive-pack) are a 403 naming the one served
@accepts_query(choice("service", ("git-upload-pack", "git-receive-pack")))
@doc(
    "Git smart HTTP for an agent (its fetch ticket)",
    content="bytes",
    errors=(401, 403, 404, 502),
    # an agent fetching a connection's repository for a job: the handler checks the
    # attempt's git fetch ticket (Basic auth), as /v1/nodes/connect checks its hello
    rule=OWN_CREDENTIAL,
)
async def proxy_refs(connection_id: str) -> Response:
    if request.args.get("service") != "git-upload-pack":
        raise Problem(
            403,
            "forbidden",
            "only git-upload-pack (fetch) is served: ask for ?service=git-upload-pack",
        )
    return await _proxy(connection_id, "info/refs")


@blueprint.post("/proxy/<connection_id>/git-upload-pack")
@doc(
    "Git smart HTTP for an agent (its fetch ticket)",
    content="bytes",
    errors=(401, 403, 404, 413, 502),
    raw_body=RawBody(
        "application/x-git-upload-pack-request",
        {"type": "string", "format": "binary"},
        description="the git upload-pack request, relayed to the connection's host",
        also=("application/octet-stream",),  # the content type is relayed, not checked
    ),
    rule=OWN_CREDENTIAL,
)
async def proxy_upload_pack(connection_id: str) -> Response:
    return await _proxy(connection_id, "git-upload-pack")
