"""Credential checks that routes share until the full auth layer lands (issue: tenancy).

Only the operator admin token is handled here: ``RUNPLANE_ADMIN_TOKEN`` passed as a bearer.
"""

from __future__ import annotations

import hmac

from quart import request

from runplane.http.context import services
from runplane.http.problems import Problem


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def require_admin() -> None:
    """401 unless the request carries the operator admin token."""
    configured = services().settings.admin_token
    presented = bearer_token()
    if configured is None:
        raise Problem(
            401,
            "unauthorized",
            "admin routes need RUNPLANE_ADMIN_TOKEN to be set on the server",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if presented is None or not hmac.compare_digest(
        presented.encode(), configured.get_secret_value().encode()
    ):
        raise Problem(
            401,
            "unauthorized",
            "this route needs the operator admin token as a bearer",
            headers={"WWW-Authenticate": "Bearer"},
        )
