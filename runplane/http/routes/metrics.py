"""``GET /metrics``: Prometheus exposition of the server's figures (docs/operations.md
"Metrics"; what is measured: runplane/services/telemetry.py).

Who may scrape: anyone on an open deploy (``RUNPLANE_AUTH`` off or shadow); with
``RUNPLANE_AUTH=required``, the operator admin token or ``RUNPLANE_METRICS_TOKEN`` as the
bearer (the figures span every org, so an org's token is not enough). The format follows
the scraper's ``Accept`` (Prometheus text 0.0.4, or OpenMetrics)."""

from __future__ import annotations

import hmac

from quart import Blueprint, Response, request

from runplane.auth.rules import OWN_CREDENTIAL
from runplane.http.auth_hook import current_principal
from runplane.http.context import services
from runplane.http.guards import bearer_token
from runplane.http.openapi import doc
from runplane.problems import Problem
from runplane.services import telemetry

blueprint = Blueprint("metrics", __name__)


def _may_scrape() -> bool:
    settings = services().settings
    if current_principal().superuser:
        return True
    wanted = settings.metrics_token
    presented = bearer_token()
    if (
        wanted is not None
        and presented is not None
        and hmac.compare_digest(presented.encode(), wanted.get_secret_value().encode())
    ):
        return True
    return settings.auth != "required"


@blueprint.get("/metrics")
@doc(
    "Prometheus metrics (text exposition)",
    content="text",
    errors=(401,),
    # Prometheus (docs/operations.md "Metrics"): open deploys anyone; with auth required
    # the route asks for the admin token or RUNPLANE_METRICS_TOKEN (a scraper's bearer)
    rule=OWN_CREDENTIAL,
)
async def metrics() -> Response:
    if not _may_scrape():
        raise Problem(
            401,
            "unauthorized",
            "/metrics needs the admin token or RUNPLANE_METRICS_TOKEN as a bearer on a "
            "deploy with RUNPLANE_AUTH=required",
            headers={"WWW-Authenticate": "Bearer"},
        )
    snapshot = await telemetry.gather(services().root)
    body, content_type = telemetry.render(snapshot, request.headers.get("Accept"))
    return Response(body, content_type=content_type)
