"""``POST /mcp`` and its versioned alias ``POST /v1/mcp``: the MCP tool facade over
JSON-RPC 2.0 (spec "MCP tool facade", docs/mcp.md; the protocol: runplane/http/mcp).

A tool call is a request to the tool's route inside this one, carrying the caller's
``Authorization`` and org header, so the route's auth rule, scopes, tenancy and
admission decide it exactly as they would a direct call."""

from __future__ import annotations

import json
from typing import Any

from quart import Blueprint, Response, current_app, request
from werkzeug.exceptions import RequestEntityTooLarge

from runplane.auth.rules import READ
from runplane.http.auth_hook import ORG_HEADER
from runplane.http.mcp.rpc import RouteAnswer, handle, oversized
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.openapi.route_doc import RawBody, tools_of

blueprint = Blueprint("mcp", __name__)

TOOLS_KEY = "runplane.mcp.tools"


_REQUEST = {
    "type": "object",
    "required": ["jsonrpc", "method"],
    "properties": {
        "jsonrpc": {"const": "2.0"},
        "id": {"type": ["string", "integer", "null"]},
        "method": {"type": "string"},
        "params": {"type": "object"},
    },
}
#: A JSON-RPC 2.0 request (or notification), or a batch of them.
RPC_BODY = RawBody(
    "application/json",
    {"oneOf": [_REQUEST, {"type": "array", "items": _REQUEST, "minItems": 1}]},
    required=False,  # an empty body is a JSON-RPC parse error, in a 200 like every error
    description="a JSON-RPC 2.0 request, a notification (no id) or a batch (docs/mcp.md)",
)
#: The request headers a tool's route sees: who the caller is, and which org it acts in.
FORWARDED = ("Authorization", ORG_HEADER)


async def _call_route(
    method: str, path: str, query: dict[str, Any] | None, body: Any
) -> RouteAnswer:
    headers = {h: request.headers[h] for h in FORWARDED if h in request.headers}
    client = current_app.test_client()
    response = await client.open(
        path, method=method, query_string=query, json=body, headers=headers
    )
    data = await response.get_data(as_text=True)
    try:
        answer = json.loads(data) if data else None
    except ValueError:  # a route that answers text (none of the tools' do today)
        answer = data
    return RouteAnswer(response.status_code, answer)


@blueprint.post("/mcp")
@blueprint.post("/v1/mcp")
@doc(
    "The MCP tool facade (JSON-RPC 2.0)",
    (v.RpcResponse, v.RpcAnswers),
    bodiless=(202,),
    raw_body=RPC_BODY,
    description="initialize, ping, tools/list, tools/call; notifications answer 202 with "
    "no body. Protocol errors are JSON-RPC error objects in a 200; a tool whose route "
    "answers a problem is a result with isError true, the problem in structuredContent.",
    # the MCP tool facade (docs/mcp.md): a bearer like any read; each tool call is a request
    # to the tool's route with the same credential, decided there by that route's rule
    rule=READ,
)
async def mcp() -> Response:
    tools = current_app.extensions.get(TOOLS_KEY)
    if tools is None:  # derived once from the routes' declarations
        tools = current_app.extensions[TOOLS_KEY] = tools_of(current_app)
    try:
        raw = await request.get_data(as_text=False)
    except RequestEntityTooLarge:  # the cap of every JSON body, as a JSON-RPC error
        answer: Any = oversized(current_app.config["MAX_CONTENT_LENGTH"])
    else:
        answer = await handle(raw, tools, _call_route)
    if answer is None:
        return Response(b"", status=202)
    return Response(json.dumps(answer, separators=(",", ":")), content_type="application/json")
