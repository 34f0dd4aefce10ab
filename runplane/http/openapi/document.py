"""The OpenAPI 3.1.0 document of the running app, generated (docs/api.md "OpenAPI").

It walks the app's routes (``declared_routes``): each route's path parameters come from
its url rule (no control characters, or the pattern its ``@doc(path=...)`` names), its
query parameters from ``@accepts_query`` (typed: :class:`runplane.http.query.Param`), its
security from the auth rule its ``@doc`` declares and the deploy's auth mode (``{}``, no
credential, where an anonymous caller passes), and its request and response bodies from
the pydantic models the ``@doc`` names, whose JSON Schemas pydantic generates in one pass
(``models_json_schema``) with ``$ref``s into ``components/schemas``, with the rules the
models' validators enforce written in (:mod:`.body_rules`); a body that is not a model
(bytes, multipart, JSON-RPC) is the route's ``raw_body``. Event streams are
``text/event-stream`` strings whose events ``x-events`` names. Error answers are RFC 9457
problems: each operation lists the statuses it can give (:func:`error_statuses`). The
WebSocket of the agents and Quart's static files are not HTTP operations of the API and
are left out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import JsonSchemaMode as Mode
from pydantic.json_schema import models_json_schema
from quart import Quart

from runplane.auth.rules import PUBLIC, WEBSOCKET, Rule
from runplane.http.query import NO_CONTROL, Param, declared_params, text
from runplane.http.ratelimit import counted

from .body_rules import REF_PREFIX, with_edge_checks, with_rules
from .route_doc import RouteDoc, declared_routes
from .views import ProblemDetails

#: The interface version the spec gives (not the package's version).
API_VERSION = "1.1.0"
REF = "#/components/schemas/{model}"
#: Endpoints that are not operations of the API.
LEFT_OUT = frozenset({"static"})
_PARAM = re.compile(r"<(?:[a-z_]+:)?([A-Za-z_][A-Za-z0-9_]*)>")
#: A path parameter: one or more characters, none a control character (input_checks.py).
PATH_PATTERN = NO_CONTROL.replace("]*$", "]+$")
#: The rules an anonymous caller passes when the deploy's auth is not ``required``.
ANONYMOUS_NEEDS = frozenset({"read", "scope"})

SECURITY_SCHEMES: dict[str, Any] = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "An API token (rpt_...), a login session (rps_...) or the admin token.",
    },
    "queryToken": {
        "type": "apiKey",
        "in": "query",
        "name": "token",
        "description": "The bearer token as ?token= (the event stream only: EventSource "
        "cannot set headers).",
    },
    "streamTicket": {
        "type": "apiKey",
        "in": "query",
        "name": "ticket",
        "description": "A stream ticket from .../subscribe (also accepted as the bearer).",
    },
    "shareToken": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Share-Token",
        "description": "A share code: reads its one job (also ?share=).",
    },
    "embedToken": {
        "type": "apiKey",
        "in": "header",
        "name": "X-Embed-Token",
        "description": "An embed token: reads its one job's allowed categories (also ?embed=).",
    },
}


def openapi_path(rule: str) -> str:
    """``/v1/jobs/<job_id>`` as ``/v1/jobs/{job_id}`` (converters dropped)."""
    return _PARAM.sub(lambda m: "{" + m.group(1) + "}", rule)


def error_statuses(rule: str, auth: Rule, route: RouteDoc, query: bool) -> list[int]:
    """The problem statuses an operation can answer: those its route names, plus 400 for
    a body or query parameters (malformed, unknown), 401/403 unless public, 400/404 for
    an id in the path, 413/422 for a body (over 1 MiB; a field's value), 400/413 for a
    raw body, 503 everywhere (overload, with Retry-After; a switched-off area)."""
    found = set(route.errors) | {503}
    if route.body is not None or query:
        found.add(400)
    if route.body is not None:
        found |= {413, 422}
    if route.raw_body is not None:  # malformed, missing or too big
        found |= {400, 413}
    if auth != PUBLIC:  # stream-ticket routes included: their rule is a read
        found |= {401, 403}
    if "<" in rule:
        found |= {400, 404}  # a path parameter with a control character is a 400
    return sorted(found)


def _security(auth: Rule, anonymous: bool) -> list[dict[str, list[str]]]:
    """The credentials an operation takes; ``{}`` (none) first where an anonymous caller
    passes (``anonymous``: the deploy's auth mode is not ``required``)."""
    if auth.need == "public" and not auth.stream_ticket:
        return []
    options: list[dict[str, list[str]]] = []
    if anonymous and auth.need in ANONYMOUS_NEEDS:
        options.append({})
    options.append({"bearer": []})
    if auth.query_token:
        options.append({"queryToken": []})
    if auth.stream_ticket:
        options.append({"streamTicket": []})
    if auth.shared:
        options += [{"shareToken": []}, {"embedToken": []}]
    return options


def _models(docs: Iterable[RouteDoc]) -> list[tuple[type[BaseModel], Mode]]:
    """Each model the routes name, with the mode it is used in (bodies are validated,
    answers serialized)."""
    seen: dict[tuple[type[BaseModel], Mode], None] = {(ProblemDetails, "serialization"): None}
    for route in docs:
        if route.body is not None:
            seen[(route.body, "validation")] = None
        answers: list[type[BaseModel] | None] = [route.page]
        if isinstance(route.response, tuple):
            answers += list(route.response)
        else:
            answers.append(route.response)
        for model in answers:
            if model is not None:
                seen[(model, "serialization")] = None
    return list(seen)


class _Schemas:
    """Every model's JSON Schema in one pydantic pass: a ``$ref`` for each, the
    definitions for ``components/schemas``."""

    def __init__(self, keys: list[tuple[type[BaseModel], Mode]]) -> None:
        refs, top = models_json_schema(keys, ref_template=REF)
        roots = [
            str(refs[key]["$ref"]).removeprefix(REF_PREFIX)
            for key in keys
            if key[1] == "validation" and "$ref" in refs[key]
        ]
        self.components: dict[str, Any] = with_edge_checks(with_rules(top.get("$defs", {})), roots)
        self._refs = refs

    def ref(self, model: type[BaseModel], *, request: bool = False) -> dict[str, Any]:
        return dict(self._refs[(model, "validation" if request else "serialization")])


def _response_schema(route: RouteDoc, schemas: _Schemas) -> dict[str, Any] | None:
    if route.response is None:
        return None
    if isinstance(route.response, tuple):
        one: dict[str, Any] = {"oneOf": [schemas.ref(m) for m in route.response]}
    else:
        one = schemas.ref(route.response)
    if route.many:
        one = {"type": "array", "items": one}
    if route.page is not None:
        one = {"oneOf": [one, schemas.ref(route.page)]}
    return one


def _success(route: RouteDoc, schemas: _Schemas) -> dict[str, Any]:
    description = HTTPStatus(route.status).phrase
    if route.content == "redirect":
        return {"description": description, "headers": {"Location": {"schema": {"type": "string"}}}}
    if route.content == "empty":
        return {"description": description}
    if route.content == "sse":  # a text stream of events, each `event:`, `id:` and JSON `data:`
        named = "; ".join(f"`{name}`: {shape}" for name, shape in route.events)
        stream = {
            "schema": {"type": "string"},
            "x-events": [{"event": name, "data": shape} for name, shape in route.events],
        }
        return {
            "description": f"{description}: server-sent events (each frame `id: <seq>`, "
            f"`event: <name>`, `data: <JSON>`): {named}",
            "content": {"text/event-stream": stream},
        }
    media = {
        "bytes": ("application/octet-stream", {"type": "string", "format": "binary"}),
        "html": ("text/html", {"type": "string"}),
        "text": ("text/plain", {"type": "string"}),
    }
    if route.content in media:
        kind, schema = media[route.content]
        return {"description": description, "content": {kind: {"schema": schema}}}
    answer = _response_schema(route, schemas)
    body = {"schema": answer} if answer is not None else {}
    return {"description": description, "content": {"application/json": body}}


def _parameters(rule: str, route: RouteDoc, query: tuple[Param, ...]) -> list[dict[str, Any]]:
    patterns = dict(route.path)
    params: list[dict[str, Any]] = [
        {
            "name": name,
            "in": "path",
            "required": True,
            "schema": {"type": "string", "pattern": patterns.get(name, PATH_PATTERN)},
        }
        for name in _PARAM.findall(rule)
    ]
    for param in query:
        one = {
            "name": param.name,
            "in": "query",
            "required": False,
            "schema": param.schema,
            "allowEmptyValue": True,  # an empty value is the parameter left out
        }
        if param.description:
            one["description"] = param.description
        params.append(one)
    return params


def _request_body(route: RouteDoc, schemas: _Schemas) -> dict[str, Any] | None:
    if route.body is not None:
        return {
            "required": not route.body_optional,
            "content": {"application/json": {"schema": schemas.ref(route.body, request=True)}},
        }
    raw = route.raw_body
    if raw is None:
        return None
    media: dict[str, Any] = {"schema": dict(raw.schema)}
    if raw.encoding is not None:
        media["encoding"] = dict(raw.encoding)
    content = {kind: media for kind in (raw.media, *raw.also)}
    body: dict[str, Any] = {"required": raw.required, "content": content}
    if raw.description:
        body["description"] = raw.description
    return body


#: methods that write: their operations list 507 (docs/operations.md "Full disks")
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _problem_response(status: int, schemas: _Schemas) -> dict[str, Any]:
    return {
        "description": HTTPStatus(status).phrase,
        "content": {"application/problem+json": {"schema": schemas.ref(ProblemDetails)}},
    }


def _operation(
    rule: str,
    endpoint: str,
    route: RouteDoc,
    auth: Rule,
    query: tuple[Param, ...],
    schemas: _Schemas,
    anonymous: bool,
    rate_limited: bool = False,
) -> dict[str, Any]:
    params = _parameters(rule, route, query)
    responses: dict[str, Any] = {str(route.status): _success(route, schemas)}
    statuses = error_statuses(rule, auth, route, bool(query))
    if rate_limited and counted(endpoint):  # 429 rate_limited (runplane/http/ratelimit.py)
        statuses = sorted({*statuses, 429})
    for status in route.also:
        responses[str(status)] = _success(replace(route, status=status), schemas)
    for status in route.bodiless:
        responses[str(status)] = {"description": HTTPStatus(status).phrase}
    for status in statuses:
        if str(status) in responses:
            continue
        responses[str(status)] = _problem_response(status, schemas)
    op: dict[str, Any] = {
        "operationId": endpoint.replace(".", "_"),
        "summary": route.summary,
        "tags": [endpoint.split(".", 1)[0]],
        "security": _security(auth, anonymous),
        "responses": responses,
    }
    if route.description:
        op["description"] = route.description
    if params:
        op["parameters"] = params
    body = _request_body(route, schemas)
    if body is not None:
        op["requestBody"] = body
    return op


class Undocumented(Exception):
    """A route has no ``@doc``: the document cannot be whole."""


def _query(view: object, auth: Rule) -> tuple[Param, ...]:
    """The query parameters of a route: its declared ones, and ``token`` where its rule
    takes the credential so."""
    query = declared_params(view)
    if auth.query_token and "token" not in {p.name for p in query}:
        query += (text("token", description="the bearer credential (EventSource)"),)
    return query


def build(
    app: Quart,
    server_url: str | None = None,
    *,
    anonymous: bool = False,
    rate_limited: bool = False,
) -> dict[str, Any]:
    """The OpenAPI 3.1.0 document of ``app``; :class:`Undocumented` names a route that
    lacks its ``@doc``. ``anonymous``: the deploy takes anonymous calls (its auth mode is
    not ``required``), so operations that anonymous callers may use list ``{}`` among
    their security requirements. ``rate_limited``: the deploy's rate limits are on, so
    operations they count list 429."""
    found: list[tuple[str, str, str, RouteDoc, Rule, tuple[Param, ...]]] = []
    missing: list[str] = []
    for d in declared_routes(app):
        if d.endpoint in LEFT_OUT or d.method == WEBSOCKET:
            continue
        if d.route is None:
            missing.append(f"{d.method} {d.rule}")
            continue
        query = _query(d.view, d.route.rule)
        found.append((d.method, d.rule, d.endpoint, d.route, d.route.rule, query))
    if missing:
        raise Undocumented("routes without @doc: " + ", ".join(sorted(missing)))
    schemas = _Schemas(_models(f[3] for f in found))
    paths: dict[str, dict[str, Any]] = {}
    ids: set[str] = set()
    for method, rule, endpoint, route, auth, query in sorted(found, key=lambda f: (f[1], f[0])):
        op = _operation(rule, endpoint, route, auth, query, schemas, anonymous, rate_limited)
        if method in WRITE_METHODS:  # 507 insufficient_storage: a full disk (store, artifacts)
            op["responses"].setdefault("507", _problem_response(507, schemas))
        if op["operationId"] in ids:  # one view serving several paths
            op["operationId"] += "_" + re.sub(r"\W+", "_", rule).strip("_")
        ids.add(op["operationId"])
        paths.setdefault(openapi_path(rule), {})[method.lower()] = op
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "runplane",
            "version": API_VERSION,
            "description": (
                "The runplane job-orchestration API. Errors are RFC 9457 problems "
                "(application/problem+json). "
                + (
                    "This deploy takes anonymous calls (RUNPLANE_AUTH is off or shadow): "
                    "operations an anonymous caller may use list {} among their security."
                    if anonymous
                    else "This deploy requires a credential (RUNPLANE_AUTH=required)."
                )
            ),
        },
        "paths": paths,
        "components": {"schemas": schemas.components, "securitySchemes": SECURITY_SCHEMES},
    }
    if server_url:
        document["servers"] = [{"url": server_url}]
    return document
