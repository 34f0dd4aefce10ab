"""The MCP facade's JSON-RPC 2.0 over the app (docs/mcp.md): initialize, the initialized
notification (202, no body), ping, tools/list, tools/call through the tool's route with
the caller's credential (a viewer's submit refused by scope, another org's job not
found), and every JSON-RPC error as an error object in a 200: parse error, invalid
request, method not found, invalid params, the tool's own failure; batches."""

from __future__ import annotations

import json
from typing import Any

from quart_trio import QuartTrio

from tests.auth.support import World, bearer, build_world, store_of


async def rpc(client: Any, message: Any, token: str | None = None, path: str = "/mcp") -> Any:
    headers = {"Content-Type": "application/json", **(bearer(token) if token else {})}
    raw = message if isinstance(message, str) else json.dumps(message)
    response = await client.post(path, data=raw, headers=headers)
    text = await response.get_data(as_text=True)
    return response.status_code, (json.loads(text) if text else None)


def call(ident: int, tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": ident,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


async def world_of(app: QuartTrio) -> tuple[Any, World]:
    client = app.test_client()
    return client, await build_world(client, store_of(app))


async def test_the_handshake_and_the_tool_list(required_app: QuartTrio) -> None:
    client, world = await world_of(required_app)
    member = world.secrets["member"]
    status, init = await rpc(
        client,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-06-18"},
        },
        member,
    )
    assert status == 200 and init["result"]["protocolVersion"] == "2025-06-18"
    assert init["result"]["capabilities"] == {"tools": {"listChanged": False}}
    assert init["result"]["serverInfo"]["name"] == "runplane"
    status, nothing = await rpc(
        client, {"jsonrpc": "2.0", "method": "notifications/initialized"}, member
    )
    assert (status, nothing) == (202, None)
    status, pong = await rpc(
        client, {"jsonrpc": "2.0", "id": "p", "method": "ping"}, member, "/v1/mcp"
    )
    assert pong == {"jsonrpc": "2.0", "id": "p", "result": {}}
    _, listed = await rpc(client, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, member)
    tools = {t["name"]: t for t in listed["result"]["tools"]}
    assert len(tools) == 11
    assert tools["submit_job"]["inputSchema"]["required"] == ["stack"]
    assert tools["get_logs"]["inputSchema"]["properties"]["limit"]["maximum"] == 1000
    assert tools["cancel_job"]["annotations"]["destructiveHint"] is True
    assert tools["list_jobs"]["annotations"]["readOnlyHint"] is True
    # no credential at all: the HTTP layer refuses first
    status, problem = await rpc(client, {"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert status == 401 and problem["status"] == 401


async def test_tools_run_with_the_callers_scopes_and_org(required_app: QuartTrio) -> None:
    client, world = await world_of(required_app)
    member, viewer, stranger = (world.secrets[p] for p in ("member", "viewer", "wrong_org"))
    _, created = await rpc(client, call(1, "submit_job", stack="shell", command=["true"]), member)
    job = created["result"]["structuredContent"]
    assert job["phase"] == "queued" and job["org_id"] == world.org_a
    assert json.loads(created["result"]["content"][0]["text"])["job_id"] == job["job_id"]
    # a tool's route refusing is the tool's execution error: a result with isError
    _, refused = await rpc(client, call(2, "submit_job", stack="shell"), viewer)
    assert "error" not in refused and refused["result"]["isError"] is True
    problem = refused["result"]["structuredContent"]
    assert (problem["status"], problem["code"]) == (403, "missing_scope")
    assert "runs:submit" in problem["detail"]
    assert refused["result"]["content"] == [
        {"type": "text", "text": f"403 missing_scope: {problem['detail']}"}
    ]
    _, read = await rpc(client, call(3, "get_job", job_id=job["job_id"]), viewer)
    assert read["result"]["structuredContent"]["job_id"] == job["job_id"]
    assert read["result"]["isError"] is False
    _, hidden = await rpc(client, call(4, "get_job", job_id=job["job_id"]), stranger)
    _, unknown = await rpc(client, call(5, "get_job", job_id="job_unknown"), stranger)
    assert hidden["result"]["isError"] is True
    assert hidden["result"]["structuredContent"]["detail"] == "job not found"
    assert hidden["result"]["structuredContent"]["status"] == 404
    assert hidden["result"]["content"] == unknown["result"]["content"]
    _, listed = await rpc(client, call(6, "list_jobs", limit=5), member)
    assert job["job_id"] in {j["job_id"] for j in listed["result"]["structuredContent"]["items"]}
    _, cancelled = await rpc(client, call(7, "cancel_job", job_id=job["job_id"]), member)
    assert cancelled["result"]["structuredContent"]["phase"] == "cancelled"
    _, mine = await rpc(client, call(8, "entitlements"), member)
    assert mine["result"]["structuredContent"]["org"] == world.org_a


async def test_json_rpc_errors_are_error_objects_in_a_200(required_app: QuartTrio) -> None:
    client, world = await world_of(required_app)
    token = world.secrets["member"]
    status, parse = await rpc(client, "{not json", token)
    assert status == 200 and parse["error"]["code"] == -32700 and parse["id"] is None
    _, invalid = await rpc(client, {"id": 1, "method": "ping"}, token)
    assert invalid["error"]["code"] == -32600
    _, missing = await rpc(client, {"jsonrpc": "2.0", "id": 2, "method": "resources/list"}, token)
    assert missing["error"]["code"] == -32601
    _, params = await rpc(client, call(3, "list_jobs", limit=0), token)
    assert params["error"]["code"] == -32602 and params["error"]["data"][0]["key"] == "limit"
    _, extra = await rpc(client, call(4, "get_job", job_id="job_x", nope=1), token)
    assert extra["error"]["code"] == -32602
    _, tool = await rpc(client, call(5, "no_such_tool"), token)
    assert tool["error"]["code"] == -32602 and "tools/list" in tool["error"]["message"]
    _, batch = await rpc(
        client,
        [
            {"jsonrpc": "2.0", "id": 6, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 7, "method": "nope"},
        ],
        token,
    )
    assert [a["id"] for a in batch] == [6, 7]
    assert batch[0]["result"] == {} and batch[1]["error"]["code"] == -32601
    _, empty = await rpc(client, [], token)
    assert empty["error"]["code"] == -32600
    # arguments are checked strictly, as a route's body is: a protocol error
    _, typed = await rpc(client, call(8, "list_jobs", limit="5"), token)
    assert typed["error"]["code"] == -32602 and typed["error"]["data"][0]["key"] == "limit"
    _, flag = await rpc(client, call(9, "list_jobs", limit=True), token)
    assert flag["error"]["code"] == -32602
    _, limits = await rpc(
        client, call(10, "submit_job", stack="shell", limits={"timeout_sec": True}), token
    )
    assert limits["error"]["code"] == -32602
    assert limits["error"]["data"][0]["key"] == "limits.timeout_sec"
    # what only the route checks (the catalog) is the tool's execution error
    _, stack = await rpc(client, call(11, "submit_job", stack="no-such-stack"), token)
    assert stack["result"]["isError"] is True
    assert stack["result"]["structuredContent"]["code"] == "unknown_stack"
    assert stack["result"]["structuredContent"]["status"] == 400
    status, only_notes = await rpc(client, [{"jsonrpc": "2.0", "method": "x"}], token)
    assert (status, only_notes) == (202, None)


async def test_hostile_bodies_are_json_rpc_errors_never_500(required_app: QuartTrio) -> None:
    """The input checks of every body, on the MCP route too (issue 37): a body nested
    3,000 levels deep, a number no field takes, a NUL: an invalid request in a 200."""
    client, world = await world_of(required_app)
    token = world.secrets["member"]
    deep = "[" * 3000 + "]" * 3000
    for raw in (
        deep,
        '{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": ' + deep + "}}",
        '{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"n": 1e999}}',
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "a\\u0000"}}',
    ):
        for path in ("/mcp", "/v1/mcp"):
            status, answer = await rpc(client, raw, token, path)
            assert status == 200 and answer["error"]["code"] == -32600, (path, raw[:40], answer)
    # a body over the cap of every JSON body: refused before any JSON-RPC, never a 500
    huge = '{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "' + "a" * 2**21 + '"}}'
    status, answer = await rpc(client, huge, token)
    assert status == 200 and answer["error"]["code"] == -32600, answer
    assert "bytes" in answer["error"]["message"]
