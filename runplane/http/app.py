"""The Quart-trio application factory.

The app's lifespan opens the store and starts the root supervisor in the app's nursery;
shutdown stops the actor tree and then flushes and closes the store. Routes reach the
actors through ``services()`` and only send messages and await replies.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, cast

from quart import Response, current_app, has_request_context, request, websocket
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException
from werkzeug.routing import MapAdapter

from runplane.artifacts import open_artifact_store
from runplane.http.auth_hook import install as install_auth
from runplane.http.context import Services
from runplane.http.error_answers import ANSWERS, Where, quart_handler
from runplane.http.input_checks import check_request_text
from runplane.http.lean.install import lean_app
from runplane.http.middleware import RequestLogMiddleware
from runplane.http.problems import problem_response
from runplane.http.query import check_query
from runplane.http.ratelimit import EXTENSION as RATE_LIMITER
from runplane.http.ratelimit import Limiter
from runplane.http.readiness import (
    Readiness,
)
from runplane.http.routes import (
    admin,
    agents,
    analytics,
    arrays,
    artifacts,
    audit,
    auth,
    events,
    git,
    health,
    jobs,
    join_tokens,
    mcp,
    me,
    metrics,
    nodes,
    openapi,
    orgs,
    pipelines,
    policy,
    registries,
    runs,
    schedules,
    secrets,
    sessions,
    sharing,
    stacks,
    streams,
    ui,
    webhooks,
)
from runplane.http.strict import check_answer, strict_views
from runplane.nodes.metrics import SAMPLE_SEC
from runplane.persistence import Store, open_store
from runplane.settings import Settings, ensure_secret_key
from runplane.stacks import Catalog, load_catalog
from runplane.system import HEARTBEAT_SEC, Root

log = logging.getLogger("runplane.http")

#: Cap on JSON request bodies (uploads and artifacts stream with their own cap).
MAX_JSON_BODY = 1024 * 1024

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "payload_too_large",
    415: "unsupported_media_type",
}


def _request_id() -> str | None:
    try:
        # put there by RequestLogMiddleware; hypercorn's scope TypedDict does not list it
        return cast("str | None", request.scope.get("runplane.request_id"))
    except RuntimeError:  # outside a request context
        return None


def _where() -> Where:
    """The current request (or the agents' WebSocket) for :mod:`error_answers`."""
    leading = current_app.extensions.get("runplane.ha.leading")
    if has_request_context():
        return Where(_request_id(), request.method, request.path, leading)
    return Where(None, "WEBSOCKET", websocket.path, leading)


def allowed_methods(app: QuartTrio, adapter: MapAdapter | None, path: str) -> list[str]:
    """The methods of the route ``path`` matches (its url rule's, across the views that
    share that rule), not of every rule the path could match: ``/v1/jobs/batch`` is the
    batch route (POST), not ``GET /v1/jobs/{job_id}`` for a job called "batch"."""
    if adapter is None:
        return []
    try:
        matched, _ = adapter.match(path, method="OPTIONS", return_rule=True)
    except HTTPException:
        return sorted(adapter.allowed_methods(path))
    methods: set[str] = set()
    for rule in app.url_map.iter_rules():
        if rule.rule == matched.rule and not rule.websocket:
            methods |= rule.methods or set()
    return sorted(methods)


class RunplaneApp(QuartTrio):
    """QuartTrio whose automatic OPTIONS answer names the matched route's methods only."""

    async def make_default_options_response(self) -> Response:
        allowed = allowed_methods(self, self.create_url_adapter(request), request.path)
        return self.response_class("", headers={"Allow": ", ".join(allowed)})


async def _on_http_exception(exc: HTTPException) -> Any:
    status = exc.code or 500
    headers: dict[str, str] = {}
    detail = exc.description or ""
    if status == 404:
        detail = f"no route for {request.method} {request.path}"
    elif status == 405:
        app = cast(QuartTrio, current_app)
        allowed = allowed_methods(app, app.create_url_adapter(request), request.path)
        if allowed:
            headers["Allow"] = ", ".join(sorted(allowed))
        detail = f"{request.method} is not allowed on {request.path}" + (
            f"; allowed: {headers['Allow']}" if allowed else ""
        )
    elif status == 413:
        detail = f"request body is over the {MAX_JSON_BODY // 1024} KiB limit for JSON bodies"
    code = _HTTP_CODES.get(status, "http_error")
    return problem_response(status, code, detail, request_id=_request_id(), headers=headers)


#: The route modules, in the order their blueprints are registered.
ROUTES = (
    health,
    admin,
    join_tokens,
    stacks,
    jobs,
    arrays,
    events,
    streams,
    pipelines,
    sessions,
    analytics,
    nodes,
    agents,
    artifacts,
    auth,
    orgs,
    audit,
    runs,
    policy,
    me,
    webhooks,
    schedules,
    sharing,
    ui,
    git,
    secrets,
    registries,
    openapi,
    metrics,
    mcp,
)


def _install_error_handlers(app: QuartTrio) -> None:
    handler = quart_handler(_where)
    for kind in ANSWERS:
        app.register_error_handler(kind, handler)
    app.register_error_handler(HTTPException, _on_http_exception)


def _install_routes(app: QuartTrio) -> None:
    for module in ROUTES:
        app.register_blueprint(module.blueprint)
    app.view_functions["static"] = ui.static_asset  # Quart's static route, declared
    # first: control characters in path ids and query values never reach auth or the store
    app.before_request(check_request_text)
    install_auth(app)  # the auth layer: each route's @doc(..., rule=...) says what it needs
    app.before_request(check_query)  # after auth: unknown query parameters are a 400
    if strict_views():  # RUNPLANE_STRICT_VIEWS=1 (tests)
        app.after_request(check_answer)  # every JSON answer is exactly its model


@dataclass(frozen=True, slots=True)
class Timing:
    heartbeat_sec: float
    node_sample_sec: float


def _lifespan(
    app: QuartTrio, settings: Settings, store: Store | None, catalog: Catalog, timing: Timing
) -> Callable[[], AsyncGenerator[None, None]]:
    """The app's lifespan: open the store (unless given), start the root supervisor in
    the app's nursery; at shutdown stop the actor tree, then close the store. Closed
    without a shutdown (``aclose``: an HA replica that lost its lease cancelled the app's
    nursery, runplane/http/replica.py), none of that runs: the tree is gone already, and
    nothing of an old leader may write or send."""

    async def lifespan() -> AsyncGenerator[None, None]:
        own_store, abandoned = store is None, False
        active = store or open_store(settings.database_url, settings.data_dir)
        if own_store:
            await active.open()
        artifact_store = open_artifact_store(settings.data_dir)
        await artifact_store.open()
        root = Root(
            settings,
            active,
            catalog,
            heartbeat_sec=timing.heartbeat_sec,
            node_sample_sec=timing.node_sample_sec,
            artifacts=artifact_store,
        )
        try:
            await app.nursery.start(root.run)
            app.extensions["runplane.readiness"] = Readiness(
                active,
                app.nursery,
                tree_running=lambda: root.supervisor.running,
                leading=app.extensions.get("runplane.ha.leading"),
            )
            app.extensions["runplane"] = Services(
                settings=settings,
                store=active,
                root=root,
                catalog=catalog,
                artifacts=artifact_store,
            )
            log.info("started", extra={"store": active.kind})
            yield
        except GeneratorExit:
            abandoned = True
            raise
        finally:
            if not abandoned:
                await root.stop()
                if own_store:
                    await active.close()
                log.info("store closed", extra={"store": active.kind})

    return lifespan


def create_app(
    settings: Settings,
    *,
    store: Store | None = None,
    heartbeat_sec: float = HEARTBEAT_SEC,
    node_sample_sec: float = SAMPLE_SEC,
    ha_status: Callable[[], dict[str, Any]] | None = None,
    ha_leading: Callable[[], bool] | None = None,
) -> QuartTrio:
    """Build the app. ``store`` may be given (tests share one); otherwise the lifespan opens
    the store named by the settings and closes it on shutdown. ``heartbeat_sec`` is what
    agents are told; a node is lost after three missed beats (tests shorten it).
    ``ha_status`` is a replica's view of the leader lease (``RUNPLANE_HA=1``), for
    ``GET /v1/ha``; ``ha_leading`` says whether its lease surely still runs (the agents'
    route sends nothing when it does not)."""
    settings = ensure_secret_key(settings)
    app = RunplaneApp("runplane")
    app.config["MAX_CONTENT_LENGTH"] = MAX_JSON_BODY
    app.config["PROPAGATE_EXCEPTIONS"] = False
    app.extensions["runplane.ha"] = ha_status
    app.extensions["runplane.ha.leading"] = ha_leading
    app.extensions[RATE_LIMITER] = Limiter.of(settings)  # None: nothing is limited
    _install_error_handlers(app)
    _install_routes(app)
    catalog = load_catalog(settings.stacks_dir)
    app.while_serving(
        _lifespan(app, settings, store, catalog, Timing(heartbeat_sec, node_sample_sec))
    )
    # Quart's documented way to add ASGI middleware; mypy flags any assignment to a method
    lean = lean_app(app, settings, app.asgi_app)
    app.asgi_app = RequestLogMiddleware(lean)  # type: ignore[method-assign]
    return app
