"""JSON-RPC 2.0 for the MCP facade: one request or a batch in, answers out (docs/mcp.md).

Methods: ``initialize`` (server info, the tools capability, the protocol version agreed),
``notifications/initialized`` and any other notification (no answer: 202), ``ping``,
``tools/list`` and ``tools/call``. The body gets the input checks of every JSON body
(:func:`runplane.http.input_checks.decode_json`: depth, int64, finite numbers, no NUL or
lone surrogate): JSON that does not parse is a parse error, JSON those checks refuse an
invalid request. Protocol errors (not JSON-RPC, an unknown method, bad params, an unknown
tool, arguments the tool's schema refuses) are JSON-RPC error objects in a 200. A tool call
runs the tool's route with the caller's own credential (``call_route``), so a refusal
there is the tool's execution error, as MCP puts it: a result with ``isError: true``, the
route's problem (status, code, detail) in ``structuredContent`` and in a text content.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from runplane import __version__
from runplane.http.input_checks import decode_json
from runplane.problems import Problem

from .tools import RouteTool

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
#: The revisions of the initialize handshake this server speaks, newest first.
PROTOCOL_VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")


@dataclass(frozen=True, slots=True)
class RouteAnswer:
    status: int
    body: Any


#: Calls a route as the caller: (method, path, query, JSON body) -> its answer.
CallRoute = Callable[[str, str, dict[str, Any] | None, Any], Awaitable[RouteAnswer]]


class RpcError(Exception):
    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def body(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error


def _error(ident: Any, exc: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": ident, "error": exc.body()}


#: The tools by name (derived from the routes' declarations).
Tools = dict[str, RouteTool]


def oversized(limit: int) -> dict[str, Any]:
    """The answer to a body over ``limit`` bytes (the cap of every JSON body)."""
    detail = f"invalid request: the body is over the {limit} bytes a JSON body may have"
    return _error(None, RpcError(INVALID_REQUEST, detail))


async def handle(raw: str | bytes, tools: Tools, call_route: CallRoute) -> Any:
    """The answer to a request body: an object, a list (a batch), or None (nothing to
    answer: notifications only)."""
    try:
        message = decode_json(raw)
    except Problem as exc:  # malformed: a parse error; hostile (too deep, ...): invalid
        if exc.code == "malformed_json":
            return _error(None, RpcError(PARSE_ERROR, f"parse error: {exc.detail}"))
        errors = [{"key": e.key, "code": e.code, "message": e.message} for e in exc.errors]
        return _error(None, RpcError(INVALID_REQUEST, f"invalid request: {exc.detail}", errors))
    if isinstance(message, list):
        if not message:
            return _error(None, RpcError(INVALID_REQUEST, "an empty batch"))
        answers = [await _one(m, tools, call_route) for m in message]
        found = [a for a in answers if a is not None]
        return found or None
    return await _one(message, tools, call_route)


async def _one(message: Any, tools: Tools, call_route: CallRoute) -> dict[str, Any] | None:
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _error(
            None, RpcError(INVALID_REQUEST, 'not a JSON-RPC 2.0 request ("jsonrpc": "2.0")')
        )
    method = message.get("method")
    notification = "id" not in message
    ident = message.get("id")
    if not isinstance(method, str) or (
        not notification and not isinstance(ident, (str, int)) and ident is not None
    ):
        return _error(ident, RpcError(INVALID_REQUEST, "a request needs a method and an id"))
    params = message.get("params", {})
    if not isinstance(params, dict):
        return _error(ident, RpcError(INVALID_PARAMS, "params must be an object"))
    if notification:
        return None  # notifications/initialized, cancelled, ...: nothing to answer
    try:
        result = await _dispatch(method, params, tools, call_route)
    except RpcError as exc:
        return _error(ident, exc)
    return {"jsonrpc": "2.0", "id": ident, "result": result}


async def _dispatch(
    method: str, params: dict[str, Any], tools: Tools, call_route: CallRoute
) -> Any:
    if method == "initialize":
        asked = params.get("protocolVersion")
        version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
        return {
            "protocolVersion": version,
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "runplane", "title": "runplane", "version": __version__},
            "instructions": "Tools over the runplane API: submit and follow jobs, list "
            "stacks and nodes. Each runs with your token's scopes.",
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": [found.tool.listing() for found in tools.values()]}
    if method == "tools/call":
        return await _call(params, tools, call_route)
    raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")


async def _call(params: dict[str, Any], tools: Tools, call_route: CallRoute) -> dict[str, Any]:
    name = params.get("name")
    found = tools.get(name) if isinstance(name, str) else None
    if found is None:
        raise RpcError(INVALID_PARAMS, f"unknown tool: {name!r}; tools/list names them")
    arguments = params.get("arguments") or {}
    tool = found.tool
    try:  # strictly, as a route takes its body (runplane/http/bodies.py validate_body)
        args = tool.args.model_validate_json(json.dumps(arguments), strict=True)
    except ValidationError as exc:
        problems = [
            {"key": ".".join(str(p) for p in e["loc"]), "message": e["msg"]} for e in exc.errors()
        ]
        detail = "; ".join(f"{p['key']}: {p['message']}" for p in problems)
        raise RpcError(
            INVALID_PARAMS, f"invalid arguments for {tool.name}: {detail}", problems
        ) from None
    answer = await call_route(found.method, found.path(args), found.query(args), found.body(args))
    if answer.status >= 400:
        return _tool_error(answer)
    structured = answer.body if isinstance(answer.body, dict) else {"items": answer.body}
    return {
        "content": [{"type": "text", "text": json.dumps(answer.body, separators=(",", ":"))}],
        "structuredContent": structured,
        "isError": False,
    }


def _tool_error(answer: RouteAnswer) -> dict[str, Any]:
    """A tool's execution error (its route answered a problem): a result with ``isError``,
    the problem in ``structuredContent`` (with its ``status``, ``code`` and ``detail``
    always there) and, for a model to read, in a text content."""
    problem = answer.body if isinstance(answer.body, dict) else {}
    detail = str(problem.get("detail") or f"the route answered {answer.status}")
    code = str(problem.get("code") or "error")
    structured = {**problem, "status": answer.status, "code": code, "detail": detail}
    return {
        "content": [{"type": "text", "text": f"{answer.status} {code}: {detail}"}],
        "structuredContent": structured,
        "isError": True,
    }
