"""The MCP facade's JSON-RPC parsing: a body nested deeper than the parser's stack is a
parse error, not a 500 (the hostile-input fuzz test found it)."""

from __future__ import annotations

from runplane.http.mcp import rpc


async def test_a_body_nested_past_the_stack_is_a_parse_error() -> None:
    async def call_route(*_: object) -> rpc.RouteAnswer:
        raise AssertionError("no tool is called")

    depth = 100_000
    answer = await rpc.handle(b"[" * depth + b"]" * depth, {}, call_route)
    assert answer["error"]["code"] == rpc.PARSE_ERROR
    assert answer["error"]["message"].startswith("parse error:")
