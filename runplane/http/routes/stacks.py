"""The stack catalog: ``GET /v1/stacks?view=full|summary|launch`` and ``GET /v1/stacks/{name}``.

The catalog is loaded once at start-up (``services().catalog``); see docs/stacks.md. Bodies
keep the views' field order (the spec's Stack order) instead of the app's sorted keys.
"""

from __future__ import annotations

import json
from typing import Any

from quart import Blueprint, Response, request

from runplane.auth.rules import READ
from runplane.http.context import services
from runplane.http.mcp.tools import NoArgs, Tool
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, choice
from runplane.problems import FieldProblem, Problem
from runplane.stacks import UnknownViewError, parse_view, stack_view, stacks_view
from runplane.stacks.views import VIEWS
from runplane.suggest import suggestion

blueprint = Blueprint("stacks", __name__, url_prefix="/v1/stacks")


def _json(body: Any) -> Response:
    return Response(json.dumps(body, separators=(",", ":")), content_type="application/json")


def _view() -> str:
    try:
        return parse_view(request.args.get("view"))
    except UnknownViewError as exc:
        message = f"unknown view {exc.view!r}; accepted: {', '.join(exc.accepted)}"
        raise Problem(
            400, "invalid_query", message, [FieldProblem("view", "not_allowed", message)]
        ) from None


@blueprint.get("")
@accepts_query(choice("view", sorted(VIEWS)))
@doc(
    "The stack catalog",
    v.Stack,
    many=True,
    rule=READ,
    mcp=Tool(
        "list_stacks",
        "List stacks",
        "The stack catalog: the environments a job can run in, with their config fields.",
        NoArgs,
    ),
)
async def list_stacks() -> Response:
    return _json(stacks_view(services().catalog, _view()))


@blueprint.get("/<name>")
@accepts_query(choice("view", sorted(VIEWS)))
@doc("One stack", v.Stack, rule=READ)
async def get_stack(name: str) -> Response:
    view = _view()
    catalog = services().catalog
    stack = catalog.get(name)
    if stack is None:
        names = catalog.names()
        hint = f"{suggestion(name, names)} ".lstrip()
        available = ", ".join(names) or "none"
        raise Problem(404, "not_found", f"no stack named {name!r}; {hint}available: {available}")
    return _json(stack_view(stack, view))
