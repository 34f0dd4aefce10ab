"""RFC 9457 problem details: the one error body shape every route returns.

``{"type", "title", "status", "detail", "code"}`` plus ``errors`` (RunProblem list) for
validation failures and ``request_id`` so a user can quote it to an operator.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from quart import Response

PROBLEM_TYPE_BASE = "https://runplane.dev/problems/"
CONTENT_TYPE = "application/problem+json"


@dataclass(frozen=True, slots=True)
class FieldProblem:
    """One validation problem; the spec's RunProblem {key, code, message}."""

    key: str
    code: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"key": self.key, "code": self.code, "message": self.message}


@dataclass(eq=False)
class Problem(Exception):
    """Raise from a route (or anything it calls) to answer with a problem body."""

    status: int
    code: str
    detail: str
    errors: list[FieldProblem] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.status} {self.code}: {self.detail}"


def problem_body(
    status: int,
    code: str,
    detail: str,
    *,
    request_id: str | None = None,
    errors: list[FieldProblem] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + code,
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": detail,
        "code": code,
    }
    if errors:
        body["errors"] = [e.as_dict() for e in errors]
    if request_id:
        body["request_id"] = request_id
    return body


def problem_response(
    status: int,
    code: str,
    detail: str,
    *,
    request_id: str | None = None,
    errors: list[FieldProblem] | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    body = problem_body(status, code, detail, request_id=request_id, errors=errors)
    response = Response(
        json.dumps(body, separators=(",", ":")), status=status, content_type=CONTENT_TYPE
    )
    for name, value in (headers or {}).items():
        response.headers[name] = value
    return response


def not_found(what: str = "resource") -> Problem:
    """The 404 for unknown ids and other orgs' ids alike: the body must not tell them apart."""
    return Problem(404, "not_found", f"{what} not found")
