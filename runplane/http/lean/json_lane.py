"""A lean lane for a JSON ``POST`` route, derived from the route's declaration (its
``@doc``: auth rule, body model, status, response model).

The happy path, in Quart's order of effects: the request's text and query (none is
allowed here), the body (within the JSON body limit, decoded by ``input_checks``,
validated strictly by the body model), the caller (a plain credential, the route's rule
under the deployment's mode, shadow lines included), the rate limit, then the route's
``handle``. Everything that is not on it goes to Quart before anything is counted or
written, with the body given back: a query string, an ``Idempotency-Key``, a share or
embed token, a credential that is malformed or not valid, a refusal of the rule, a body
that is empty, too large or does not validate, a server still starting. From the rate
limit on, the lane answers itself: a 429 and every exception the route raises are
answered by ``error_answers`` exactly as Quart's handlers answer them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from pydantic import BaseModel
from quart import Response
from quart_trio import QuartTrio

from runplane.auth.principal import Principal
from runplane.http.auth_hook import plain_principal, verdict
from runplane.http.bodies import body_of
from runplane.http.context import Services
from runplane.http.error_answers import Where, answer
from runplane.http.openapi.route_doc import RouteDoc, doc_of
from runplane.http.openapi.views import View
from runplane.http.ratelimit import limiter_of
from runplane.http.strict import drift_answer, strict_views
from runplane.problems import Problem

from .exchange import Body, header_map, read_body, remote_addr, replay, send_response
from .lanes import LeanLanes, Next, Receive, Scope, Send

#: Headers that take a request off the happy path (Quart answers it).
OFF_PATH_HEADERS = ("idempotency-key", "x-share-token", "x-embed-token")


@dataclass(frozen=True, slots=True)
class Caller:
    """Who sent a lean request: the principal, and the address an audit row names."""

    principal: Principal
    remote: str


#: A route's work on the lean lane: its JSON answer and status.
Handle = Callable[[Services, Any, Caller], Awaitable[tuple[dict[str, Any], int]]]
#: A cheaper validation of the body model for bodies it knows (``parse_body``'s ``fast``).
Fast = Callable[[Mapping[str, Any]], BaseModel | None]


class JsonLane:
    """The lean lane of the JSON POST route ``endpoint`` of ``app``."""

    def __init__(self, app: QuartTrio, endpoint: str, handle: Handle, fast: Fast | None = None):
        route = doc_of(app.view_functions[endpoint])
        if route is None or route.body is None:
            raise ValueError(f"{endpoint} declares no body model: no lean lane for it")
        rules = [r for r in app.url_map.iter_rules() if r.endpoint == endpoint]
        if len(rules) != 1 or rules[0].methods is None or "POST" not in rules[0].methods:
            raise ValueError(f"{endpoint} is not one POST route: no lean lane for it")
        self.app, self.endpoint, self.handle, self.fast = app, endpoint, handle, fast
        self.route: RouteDoc = route
        self.body_model: type[BaseModel] = route.body
        self.path = rules[0].rule
        self.name = f"POST {self.path}"

    def install(self, lanes: LeanLanes) -> None:
        lanes.add("http", "POST", self.path, self)

    async def __call__(self, scope: Scope, receive: Receive, send: Send, next: Next) -> None:
        svc: Services | None = self.app.extensions.get("runplane")
        headers = header_map(scope)
        if svc is None or scope.get("query_string") or _off_path(headers, self._limit):
            await next(scope, receive, send)
            return
        body = await read_body(receive, self._limit, self.app.config["BODY_TIMEOUT"])
        parsed = self._parse(body)
        principal = None
        if parsed is not None:
            principal = await plain_principal(svc, self.route.rule, headers)
        if principal is None or self._refused(svc, principal, scope):
            await next(scope, replay(body, receive), send)
            return
        where = Where(
            scope.get("runplane.request_id"),
            "POST",
            scope["path"],
            self.app.extensions.get("runplane.ha.leading"),
        )
        response = await self._answer(svc, parsed, Caller(principal, remote_addr(scope)), where)
        await send_response(send, response)

    @property
    def _limit(self) -> int:
        limit: int = self.app.config["MAX_CONTENT_LENGTH"]
        return limit

    def _parse(self, body: Body) -> BaseModel | None:
        """The body as the route's model; None for anything Quart must answer."""
        if not body.complete:
            return None
        try:
            return body_of(body.data, self.body_model, self.fast)
        except Problem:
            return None

    def _refused(self, svc: Services, principal: Principal, scope: Scope) -> bool:
        return verdict(svc, self.route.rule, principal, None, self.name, scope["path"]) is not None

    async def _answer(self, svc: Services, body: Any, caller: Caller, where: Where) -> Response:
        try:
            limiter = limiter_of(self.app.extensions)
            if limiter is not None:
                limiter.check(self.endpoint, caller.principal, caller.remote)
            reply, status = await self.handle(svc, body, caller)
        except Exception as exc:  # answered as Quart's error handlers answer it
            return answer(exc, where)
        if self._strict and status in (self.route.status, *self.route.also):
            drifted = drift_answer(self.route, self.name, reply)
            if drifted is not None:
                return drifted
        response = cast(Response, self.app.json.response(reply))
        response.status_code = status
        return response

    @property
    def _strict(self) -> bool:
        """Whether ``check_answer`` (strict mode, tests) would check this route's answer."""
        model = self.route.response
        return strict_views() and model is not None and model is not View


def _off_path(headers: Mapping[str, str], limit: int) -> bool:
    """Whether the headers alone take the request to Quart."""
    if any(name in headers for name in OFF_PATH_HEADERS):
        return True
    declared = headers.get("content-length")
    return declared is not None and (not declared.isdigit() or int(declared) > limit)
