"""``/v1/webhooks``: an org's outgoing webhook endpoints (docs/webhooks.md). Manage tier:
the admin token (any org: it names ``org_id`` on create) or an org owner/admin (its own
org; another org's ids are 404). 503 with ``RUNPLANE_DISABLE=webhooks``."""

from __future__ import annotations

from typing import Any

from quart import Blueprint

from runplane.auth.rules import MANAGE
from runplane.http import audit
from runplane.http.bodies import parse_body
from runplane.http.caller import current_caller
from runplane.http.context import services
from runplane.http.guards import require_area
from runplane.http.openapi import doc
from runplane.http.openapi import views as v
from runplane.http.query import accepts_query, str_arg
from runplane.webhooks import endpoints

blueprint = Blueprint("webhooks", __name__, url_prefix="/v1/webhooks")

CREATED_NOTE = (
    "the signing secret is shown only now: store it where your receiver can read it; "
    "deliveries carry X-Runplane-Signature: sha256=HMAC-SHA256(secret, "
    "'<X-Runplane-Timestamp>.<raw body>') and the Standard Webhooks headers"
)


def _area() -> None:
    require_area("webhooks", "outgoing webhooks")


async def _endpoint(webhook_id: str) -> endpoints.Endpoint:
    return await services().root.webhooks.endpoint(webhook_id, current_caller().read_org)


@blueprint.post("")
@doc(
    "Register a webhook endpoint (its secret shown once)",
    v.WebhookCreated,
    status=201,
    body=endpoints.WebhookBody,
    rule=MANAGE,
)
async def create_webhook() -> tuple[dict[str, Any], int]:
    _area()
    body = await parse_body(endpoints.WebhookBody)
    caller = current_caller()
    endpoint, secret = await services().root.webhooks.create(
        body, caller_org=caller.org_id, superuser=caller.superuser, by=caller.subject
    )
    view = endpoint.view()
    await audit.record(
        "webhooks:create", "webhook", endpoint.id, org_id=endpoint.org_id, after=view
    )
    return {**view, "secret": secret, "note": CREATED_NOTE}, 201


@blueprint.get("")
@accepts_query("org")
@doc("Webhook endpoints", v.WebhookView, many=True, rule=MANAGE)
async def list_webhooks() -> list[dict[str, Any]]:
    _area()
    caller = current_caller()
    org = str_arg("org") if caller.read_org is None else caller.read_org
    return [e.view() for e in await services().root.webhooks.listing(org)]


@blueprint.delete("/<webhook_id>")
@doc("Delete a webhook endpoint", v.Deleted, rule=MANAGE)
async def delete_webhook(webhook_id: str) -> dict[str, str]:
    _area()
    endpoint = await _endpoint(webhook_id)
    await services().root.webhooks.delete(endpoint)
    await audit.record(
        "webhooks:delete", "webhook", endpoint.id, org_id=endpoint.org_id, after=endpoint.view()
    )
    return {"deleted": endpoint.id}


@blueprint.post("/<webhook_id>/test")
@doc("Send a test delivery", v.WebhookTestResult, status=202, rule=MANAGE)
async def test_webhook(webhook_id: str) -> tuple[dict[str, str], int]:
    _area()
    endpoint = await _endpoint(webhook_id)
    delivery_id = await services().root.webhooks.ping(endpoint)
    await audit.record(
        "webhooks:test",
        "webhook",
        endpoint.id,
        org_id=endpoint.org_id,
        after={"delivery_id": delivery_id},
    )
    return {"delivery_id": delivery_id, "status": "queued"}, 202


@blueprint.get("/<webhook_id>/deliveries")
@doc("A webhook's deliveries", v.WebhookDelivery, many=True, rule=MANAGE)
async def list_deliveries(webhook_id: str) -> list[dict[str, Any]]:
    _area()
    endpoint = await _endpoint(webhook_id)
    return [d.view() for d in await services().root.webhooks.deliveries(endpoint.id)]
