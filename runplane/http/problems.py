"""RFC 9457 problem details: the one error body shape every route returns.

``{"type", "title", "status", "detail", "code"}`` plus ``errors`` (RunProblem list) for
validation failures and ``request_id`` so a user can quote it to an operator.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from quart import Response

from runplane.problems import FieldProblem

__all__ = ["problem_body", "problem_response"]

PROBLEM_TYPE_BASE = "https://runplane.dev/problems/"
CONTENT_TYPE = "application/problem+json"


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
