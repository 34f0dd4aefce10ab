"""The OpenAPI 3.1.0 document of this server (docs/api.md "OpenAPI"): ``GET /openapi.json``
and its versioned alias ``GET /v1/openapi.json``, generated from the routes once per
process and served to anyone (it holds no data). Its security follows the deploy's auth
mode: where anonymous calls are taken (``RUNPLANE_AUTH`` off or shadow), the operations an
anonymous caller may use list ``{}`` (no credential) among their requirements. Where rate
limits are on (``RUNPLANE_RATE_LIMIT``), each operation they count lists 429."""

from __future__ import annotations

from typing import Any

from quart import Blueprint, current_app

from runplane.auth.rules import PUBLIC
from runplane.http.context import services
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.openapi.document import build
from runplane.http.ratelimit import limiter_of

blueprint = Blueprint("openapi", __name__)

_BUILT = "runplane_openapi_document"


def document() -> dict[str, Any]:
    """The app's document, built on first use (the url map is fixed by then)."""
    built = current_app.config.get(_BUILT)
    if built is None:
        anonymous = services().settings.auth != "required"
        limited = limiter_of(current_app.extensions) is not None
        built = current_app.config[_BUILT] = build(
            current_app, anonymous=anonymous, rate_limited=limited
        )
    return dict(built)


@blueprint.get("/openapi.json")
@blueprint.get("/v1/openapi.json")
@doc(
    "This document (OpenAPI 3.1.0)",
    v.View,
    # the OpenAPI document (docs/api.md "OpenAPI"): generated from the routes, no data
    rule=PUBLIC,
)
async def openapi_json() -> dict[str, Any]:
    return document()
