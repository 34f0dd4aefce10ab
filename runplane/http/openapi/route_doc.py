"""A route's declaration: ``@doc(...)`` on the view, the one place a route says what it is.

The decorator records the route's auth rule (:class:`runplane.auth.rules.Rule`, which the
auth hook enforces), the request body model (the one the route hands to ``parse_body``; a
test checks they agree), the response model and status, the kind of content (JSON, an
event stream, bytes, a page, a redirect, nothing), the error statuses the route raises
beyond those its auth rule, path, query and body imply (see
:func:`runplane.http.openapi.document.error_statuses`) and, for a route that is also an
MCP tool, the tool (:class:`runplane.http.mcp.tools.Tool`). Everything else derives from
it by walking the app's routes (:func:`declared_routes`): the rule table, the OpenAPI
document, the MCP tool list, the route matrix's coverage check, and the strict check of
the answers in tests (:mod:`runplane.http.strict`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel
from quart import Quart

from runplane.auth.rules import Rule, methods_of
from runplane.http.mcp.tools import RouteTool, Tool

#: The attribute ``doc`` puts on a view function.
DOC_ATTR = "runplane_openapi"

Content = Literal["json", "sse", "bytes", "html", "redirect", "empty", "text"]
V = TypeVar("V", bound=Callable[..., object])


@dataclass(frozen=True, slots=True)
class RawBody:
    """A request body that is not a JSON object of a body model: bytes, a multipart form,
    JSON-RPC. ``schema`` is its OpenAPI schema under ``media`` (``encoding``: the
    multipart encoding object, when there is one)."""

    media: str
    schema: Mapping[str, Any]
    required: bool = True
    description: str = ""
    encoding: Mapping[str, Any] | None = None
    #: other media types taken with the same schema
    also: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class RouteDoc:
    summary: str
    #: what the caller needs (runplane/auth/rules.py; enforced by runplane/http/auth_hook.py)
    rule: Rule
    response: type[BaseModel] | tuple[type[BaseModel], ...] | None = None
    #: the response is a JSON array of ``response``
    many: bool = False
    #: a list that ``?paginate=1`` turns into this page envelope instead
    page: type[BaseModel] | None = None
    status: int = 200
    #: other success statuses with the same body (201 created / 200 replaced, ...)
    also: tuple[int, ...] = ()
    #: other success statuses answered with no body (a JSON-RPC notification's 202)
    bodiless: tuple[int, ...] = ()
    content: Content = "json"
    body: type[BaseModel] | None = None
    #: the body may be left out (the model's defaults apply)
    body_optional: bool = False
    #: a body the route reads that is not a body model (``body`` is then None)
    raw_body: RawBody | None = None
    errors: tuple[int, ...] = ()
    description: str = ""
    #: an event stream's events (``content="sse"``): each name with its data's JSON shape
    events: tuple[tuple[str, str], ...] = ()
    #: the MCP tool that calls this route (docs/mcp.md)
    mcp: Tool | None = None
    #: path parameters narrower than "no control characters": name -> JSON Schema pattern
    path: tuple[tuple[str, str], ...] = ()


def doc(
    summary: str,
    response: type[BaseModel] | tuple[type[BaseModel], ...] | None = None,
    *,
    rule: Rule,
    many: bool = False,
    page: type[BaseModel] | None = None,
    status: int = 200,
    also: tuple[int, ...] = (),
    bodiless: tuple[int, ...] = (),
    content: Content = "json",
    body: type[BaseModel] | None = None,
    body_optional: bool = False,
    raw_body: RawBody | None = None,
    errors: tuple[int, ...] = (),
    description: str = "",
    events: Mapping[str, str] | None = None,
    mcp: Tool | None = None,
    path: Mapping[str, str] | None = None,
) -> Callable[[V], V]:
    """Declare a route (put it under the route decorator): its auth rule, body, answer,
    errors and MCP tool."""
    record = RouteDoc(
        summary=summary,
        rule=rule,
        response=response,
        many=many,
        page=page,
        status=status,
        also=also,
        bodiless=bodiless,
        content=content,
        body=body,
        body_optional=body_optional,
        raw_body=raw_body,
        errors=errors,
        description=description,
        events=tuple((events or {}).items()),
        mcp=mcp,
        path=tuple((path or {}).items()),
    )

    def mark(view: V) -> V:
        setattr(view, DOC_ATTR, record)
        return view

    return mark


def doc_of(view: object) -> RouteDoc | None:
    found = getattr(view, DOC_ATTR, None)
    return found if isinstance(found, RouteDoc) else None


@dataclass(frozen=True, slots=True)
class Declared:
    """One (method, url rule) the app serves, with its view's declaration (None: the view
    has none, a bug the auth hook answers 500 to and the route matrix reports)."""

    method: str
    rule: str
    endpoint: str
    view: Callable[..., object]
    route: RouteDoc | None


def declared_routes(app: Quart) -> list[Declared]:
    """Every (method, url rule) ``app`` serves with its declaration, in the url map's order."""
    return [
        Declared(method, url_rule.rule, url_rule.endpoint, view, doc_of(view))
        for url_rule in app.url_map.iter_rules()
        for view in (app.view_functions[url_rule.endpoint],)
        for method in methods_of(url_rule)
    ]


def rules_of(app: Quart) -> dict[tuple[str, str], Rule]:
    """The rule table, derived: (method, url rule) -> its declared rule."""
    return {(d.method, d.rule): d.route.rule for d in declared_routes(app) if d.route is not None}


def tools_of(app: Quart) -> dict[str, RouteTool]:
    """The MCP tool list, derived: each route that declares a tool, by the tool's name."""
    found: dict[str, RouteTool] = {}
    for d in declared_routes(app):
        if d.route is None or d.route.mcp is None:
            continue
        tool = d.route.mcp
        if tool.name in found:
            raise ValueError(f"two routes declare the MCP tool {tool.name!r}")
        found[tool.name] = RouteTool(tool, d.method, d.rule)
    return found
