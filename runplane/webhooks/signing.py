"""Signing a webhook delivery (docs/webhooks.md#verifying-a-delivery).

Two signatures over the same raw body, so receivers can use either:

* ``X-Runplane-Signature: sha256=<hex>``: HMAC-SHA256 keyed with the whole secret
  (``whsec_...``) over ``<timestamp>.<raw body>`` (conventions; Stripe's scheme), with
  ``X-Runplane-Timestamp`` (unix seconds), ``X-Runplane-Event`` and
  ``X-Runplane-Delivery`` (the delivery id, the same on every retry);
* the Standard Webhooks headers ``webhook-id`` (the delivery id), ``webhook-timestamp``
  and ``webhook-signature: v1,<base64 HMAC-SHA256>`` keyed with the base64-decoded part
  of the secret after ``whsec_``, over ``<id>.<timestamp>.<raw body>``.

Receivers should refuse a timestamp more than 5 minutes away from their clock (replay).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

SECRET_PREFIX = "whsec_"
#: How far a receiver should let a timestamp be from its clock (seconds).
TOLERANCE_SEC = 300


def runplane_signature(secret: str, timestamp: int, body: bytes) -> str:
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def standard_signature(secret: str, delivery_id: str, timestamp: int, body: bytes) -> str:
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    mac = hmac.new(key, f"{delivery_id}.{timestamp}.".encode() + body, hashlib.sha256)
    return "v1," + base64.b64encode(mac.digest()).decode("ascii")


def headers(
    secret: str, delivery_id: str, event: str, timestamp: int, body: bytes
) -> list[tuple[str, str]]:
    return [
        ("X-Runplane-Event", event),
        ("X-Runplane-Delivery", delivery_id),
        ("X-Runplane-Timestamp", str(timestamp)),
        ("X-Runplane-Signature", runplane_signature(secret, timestamp, body)),
        ("webhook-id", delivery_id),
        ("webhook-timestamp", str(timestamp)),
        ("webhook-signature", standard_signature(secret, delivery_id, timestamp, body)),
    ]


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    now: float,
    *,
    tolerance: float = TOLERANCE_SEC,
) -> bool:
    """What a receiver does (``headers`` with lowercase names): the timestamp is recent
    and the ``X-Runplane-Signature`` matches, compared in constant time."""
    try:
        timestamp = int(headers["x-runplane-timestamp"])
        given = headers["x-runplane-signature"]
    except (KeyError, ValueError):
        return False
    if abs(now - timestamp) > tolerance:
        return False
    return hmac.compare_digest(given, runplane_signature(secret, timestamp, body))
