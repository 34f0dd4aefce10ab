"""Webhook endpoints: where an org's run events go (``/v1/webhooks``, docs/webhooks.md).

An endpoint has a URL (checked by the egress guard at create and at each delivery), the
event types it receives (all by default) and a signing secret: ``whsec_`` + 24 random
bytes in standard base64 (so the Standard Webhooks libraries take it as it is), shown once
in the creating response and stored sealed (AES-256-GCM, the endpoint id as associated
data). Deleting an endpoint deletes its deliveries with it.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runplane.egress import BadUrl, parse_url
from runplane.ids import new_id
from runplane.persistence import Store, now_ms
from runplane.problems import FieldProblem, Problem, not_found
from runplane.sealing import Sealer
from runplane.timefmt import iso_ms

from . import deliveries

ENDPOINT_PREFIX = "wh_"
SECRET_PREFIX = "whsec_"
#: The run events (spec); ``ping`` is the synthetic event of ``POST .../test`` (no run,
#: ``deliveries.PING``).
EVENTS = ("run.succeeded", "run.failed", "run.cancelled")
_COLUMNS = "id, org_id, url, events, enabled, secret, created_by, created_at"


class WebhookBody(BaseModel):
    """The create body. ``url`` and ``events`` are checked by hand (400 naming the field)."""

    model_config = ConfigDict(extra="forbid")

    url: Any = None
    org_id: str | None = Field(None, min_length=1, max_length=128)
    events: Any = None


@dataclass(frozen=True, slots=True)
class Endpoint:
    id: str
    org_id: str
    url: str
    events: tuple[str, ...]
    enabled: bool
    sealed_secret: str
    created_by: str
    created_at: int

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Endpoint:
        return cls(
            id=row["id"],
            org_id=row["org_id"],
            url=row["url"],
            events=tuple(e for e in row["events"].split(",") if e),
            enabled=bool(row["enabled"]),
            sealed_secret=row["secret"],
            created_by=row["created_by"],
            created_at=row["created_at"],
        )

    def view(self) -> dict[str, Any]:
        """WebhookView: never the secret."""
        return {
            "id": self.id,
            "org_id": self.org_id,
            "url": self.url,
            "events": list(self.events),
            "enabled": self.enabled,
            "created_at": iso_ms(self.created_at),
        }

    def secret(self, sealer: Sealer) -> str:
        return sealer.open(self.sealed_secret, aad=self.id)


def _bad(field: str, message: str) -> Problem:
    return Problem(400, "invalid_field", message, [FieldProblem(field, "invalid", message)])


def checked_url(value: Any) -> str:
    if value is None or value == "":
        message = "url is required: the http(s) address that receives the events"
        raise Problem(400, "missing_field", message, [FieldProblem("url", "missing", message)])
    if not isinstance(value, str):
        raise _bad("url", "url must be a string (an http or https address)")
    try:
        parse_url(value)
    except BadUrl as exc:
        raise _bad("url", f"url: {exc}") from None
    return value


def checked_events(value: Any) -> tuple[str, ...]:
    if value is None or value == []:
        return EVENTS  # an endpoint with no events list receives all
    if not isinstance(value, list) or not all(isinstance(e, str) for e in value):
        raise _bad("events", f"events must be a list of: {', '.join(EVENTS)}")
    unknown = [e for e in value if e not in EVENTS]
    if unknown:
        raise _bad("events", f"unknown event {unknown[0]!r}; accepted: {', '.join(EVENTS)}")
    return tuple(dict.fromkeys(value))


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(os.urandom(24)).decode("ascii")


async def insert(store: Store, endpoint: Endpoint) -> None:
    await store.execute(
        f"INSERT INTO webhook_endpoints ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?)",
        (
            endpoint.id,
            endpoint.org_id,
            endpoint.url,
            ",".join(endpoint.events),
            int(endpoint.enabled),
            endpoint.sealed_secret,
            endpoint.created_by,
            endpoint.created_at,
        ),
    )


def new_endpoint(
    sealer: Sealer, *, org_id: str, url: str, events: Sequence[str], created_by: str
) -> tuple[Endpoint, str]:
    """A new endpoint (not stored yet) and its secret in clear (for the response only)."""
    endpoint_id = new_id(ENDPOINT_PREFIX)
    secret = new_secret()
    endpoint = Endpoint(
        id=endpoint_id,
        org_id=org_id,
        url=url,
        events=tuple(events),
        enabled=True,
        sealed_secret=sealer.seal(secret, aad=endpoint_id),
        created_by=created_by,
        created_at=now_ms(),
    )
    return endpoint, secret


async def get(store: Store, endpoint_id: str, org_id: str | None) -> Endpoint:
    """The endpoint (``org_id`` None: any org's); 404 when unknown or another org's."""
    row = await store.fetchone(
        f"SELECT {_COLUMNS} FROM webhook_endpoints WHERE id = ?", (endpoint_id,)
    )
    if row is None or (org_id is not None and row["org_id"] != org_id):
        raise not_found("webhook")
    return Endpoint.of(row)


async def find(store: Store, endpoint_id: str) -> Endpoint | None:
    row = await store.fetchone(
        f"SELECT {_COLUMNS} FROM webhook_endpoints WHERE id = ?", (endpoint_id,)
    )
    return None if row is None else Endpoint.of(row)


async def listing(store: Store, org_id: str | None) -> list[Endpoint]:
    """Newest first; ``org_id`` None: every org's."""
    if org_id is None:
        rows = await store.fetchall(
            f"SELECT {_COLUMNS} FROM webhook_endpoints ORDER BY id DESC", ()
        )
    else:
        rows = await store.fetchall(
            f"SELECT {_COLUMNS} FROM webhook_endpoints WHERE org_id = ? ORDER BY id DESC",
            (org_id,),
        )
    return [Endpoint.of(r) for r in rows]


async def orgs_with_endpoints(store: Store) -> set[str]:
    rows = await store.fetchall("SELECT DISTINCT org_id FROM webhook_endpoints", ())
    return {r["org_id"] for r in rows}


async def delete(store: Store, endpoint: Endpoint) -> None:
    """The endpoint and its deliveries, together (pending ones are never attempted)."""

    def run(tx: Any) -> None:
        deliveries.delete_of_endpoint(tx, endpoint.id)
        tx.execute("DELETE FROM webhook_endpoints WHERE id = ?", (endpoint.id,))

    await store.transaction(run)
