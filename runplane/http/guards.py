"""Credential checks routes may repeat on top of the auth layer (``runplane/http/auth_hook.py``,
which enforces the route rule table before any route runs).

``require_admin`` re-checks that the request's principal is the operator admin token (the
hook already did for routes whose rule is ``admin``); ``bearer_token`` reads the raw bearer
for the few handlers that act on the presented secret itself (logout); ``require_area``
answers 503 for an area switched off with ``RUNPLANE_DISABLE``.
"""

from __future__ import annotations

from quart import request

from runplane.http.auth_hook import current_principal
from runplane.http.context import services
from runplane.problems import Problem


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def require_admin() -> None:
    """401 unless the request's principal is the operator admin token."""
    if current_principal().superuser:
        return
    if services().settings.admin_token is None:
        raise Problem(
            401,
            "unauthorized",
            "admin routes need RUNPLANE_ADMIN_TOKEN to be set on the server",
            headers={"WWW-Authenticate": "Bearer"},
        )
    raise Problem(
        401,
        "unauthorized",
        "this route needs the operator admin token as a bearer",
        headers={"WWW-Authenticate": "Bearer"},
    )


def require_area(area: str, what: str) -> None:
    """503 when ``area`` is switched off with RUNPLANE_DISABLE."""
    if not services().settings.area_enabled(area):
        raise Problem(
            503,
            "feature_disabled",
            f"{what} is disabled on this server (RUNPLANE_DISABLE contains {area!r}); "
            f"remove it from RUNPLANE_DISABLE to use it",
        )
