"""The MCP facade's JSON-RPC parsing: the body gets the input checks of every JSON body
(runplane/http/input_checks.py). JSON that does not parse is a parse error; JSON those
checks refuse (nested too deep, even past the parser's stack; a number no field takes; a
NUL) is an invalid request naming where; never a 500 (the hostile-input fuzz test and
issue 37 found bodies nested 3,000 levels deep answering 500)."""

from __future__ import annotations

import pytest

from runplane.http.input_checks import MAX_DEPTH
from runplane.http.mcp import rpc


async def call_route(*_: object) -> rpc.RouteAnswer:
    raise AssertionError("no tool is called")


def nested(depth: int) -> bytes:
    inner = b"[" * depth + b"]" * depth
    return b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": ' + inner + b"}}"


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 900, 3_000, 100_000])
async def test_a_body_nested_too_deep_is_an_invalid_request(depth: int) -> None:
    for raw in (nested(depth), b"[" * depth + b"]" * depth):
        answer = await rpc.handle(raw, {}, call_route)
        assert answer["id"] is None
        assert answer["error"]["code"] == rpc.INVALID_REQUEST, answer
        assert "nested deeper than" in answer["error"]["message"]
        assert answer["error"]["data"][0]["code"] == "too_deep"


async def test_a_body_within_the_depth_is_answered() -> None:
    answer = await rpc.handle(nested(MAX_DEPTH - 4), {}, call_route)
    assert answer == {"jsonrpc": "2.0", "id": 1, "result": {}}


def ping_with(value: bytes) -> bytes:
    return b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"n": ' + value + b"}}"


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (ping_with(b"1e999"), "out_of_range"),
        (ping_with(b"9" * 5000), "out_of_range"),
        (ping_with(b"NaN"), "out_of_range"),
        (ping_with(b'"a\\u0000b"'), "invalid_text"),
    ],
)
async def test_what_the_input_checks_refuse_is_an_invalid_request(raw: bytes, code: str) -> None:
    answer = await rpc.handle(raw, {}, call_route)
    assert answer["error"]["code"] == rpc.INVALID_REQUEST, answer
    assert answer["error"]["data"][0]["code"] == code


@pytest.mark.parametrize("raw", [b"{not json", b"\xff\xfe", b""])
async def test_what_does_not_parse_is_a_parse_error(raw: bytes) -> None:
    answer = await rpc.handle(raw, {}, call_route)
    assert answer["error"]["code"] == rpc.PARSE_ERROR, answer
    assert answer["error"]["message"].startswith("parse error:")
