"""The HTTP skeleton: probes, RFC 9457 problem bodies, request ids and request logs."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.auth.rules import PUBLIC
from runplane.http.app import MAX_JSON_BODY, create_app
from runplane.http.openapi import doc
from runplane.persistence import StoreClosedError
from runplane.settings import Settings

from .conftest import ADMIN

PROBLEM = "application/problem+json"


def _admin() -> dict[str, str]:
    return {"Authorization": f"Bearer {ADMIN}"}


@pytest.mark.parametrize("path", ["/healthz", "/v1/healthz"])
async def test_healthz(client: Any, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 200
    assert response.content_type.startswith("text/plain")
    assert await response.get_data(as_text=True) == "ok"
    assert response.headers["X-Request-ID"].startswith("req_")


async def test_unknown_route_is_problem_404(client: Any) -> None:
    response = await client.get("/v1/nope")
    assert response.status_code == 404
    assert response.content_type == PROBLEM
    body = await response.get_json()
    assert body["status"] == 404 and body["code"] == "not_found"
    assert body["title"] == "Not Found"
    assert body["type"].endswith("/not_found")
    assert "/v1/nope" in body["detail"]
    assert body["request_id"] == response.headers["X-Request-ID"]


async def test_wrong_method_is_problem_405_with_allow(client: Any) -> None:
    response = await client.delete("/healthz")
    assert response.status_code == 405
    assert response.content_type == PROBLEM
    body = await response.get_json()
    assert body["code"] == "method_not_allowed"
    assert "GET" in response.headers["Allow"]


async def test_malformed_json_is_400_saying_where(client: Any) -> None:
    response = await client.post(
        "/v1/admin/channel-target",
        data=b'{"channel": "stable",',
        headers={**_admin(), "Content-Type": "application/json"},
    )
    assert response.status_code == 400
    body = await response.get_json()
    assert body["code"] == "malformed_json"
    assert "line 1" in body["detail"]


async def test_non_object_json_is_400(client: Any) -> None:
    response = await client.post("/v1/admin/channel-target", json=[1, 2], headers=_admin())
    assert response.status_code == 400
    assert (await response.get_json())["code"] == "malformed_json"


async def test_unknown_field_is_400_naming_it(client: Any) -> None:
    response = await client.post(
        "/v1/admin/channel-target",
        json={"channel": "stable", "version": "1.2.0", "verison": "x"},
        headers=_admin(),
    )
    assert response.status_code == 400
    body = await response.get_json()
    assert body["code"] == "unknown_field"
    message = "unknown field 'verison'; accepted: channel, version (did you mean 'version'?)"
    assert body["detail"] == message
    assert body["errors"] == [{"key": "verison", "code": "unknown_field", "message": message}]


async def test_missing_field_is_400_naming_it(client: Any) -> None:
    response = await client.post(
        "/v1/admin/channel-target", json={"channel": "stable"}, headers=_admin()
    )
    assert response.status_code == 400
    body = await response.get_json()
    assert body["errors"][0]["key"] == "version"
    assert body["errors"][0]["code"] == "missing_field"


async def test_wrong_type_is_400_naming_it(client: Any) -> None:
    response = await client.post(
        "/v1/admin/channel-target", json={"channel": "stable", "version": 3}, headers=_admin()
    )
    assert response.status_code == 400
    body = await response.get_json()
    assert body["errors"][0]["key"] == "version"
    assert body["errors"][0]["code"] == "bad_type"


async def test_oversized_body_is_413(client: Any) -> None:
    payload = json.dumps({"channel": "x" * (MAX_JSON_BODY + 10), "version": "1"}).encode()
    response = await client.post(
        "/v1/admin/channel-target",
        data=payload,
        headers={**_admin(), "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    body = await response.get_json()
    assert body["code"] == "payload_too_large"
    assert response.content_type == PROBLEM


async def test_unexpected_error_is_500_without_internals(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    application = create_app(make_settings())

    @application.get("/v1/explode")
    @doc("Explode", rule=PUBLIC)
    async def explode() -> str:
        raise RuntimeError("database password is hunter2")

    async with application.test_app():
        with caplog.at_level(logging.INFO):
            response = await application.test_client().get("/v1/explode")
    assert response.status_code == 500
    text = await response.get_data(as_text=True)
    assert "hunter2" not in text and "RuntimeError" not in text
    body = json.loads(text)
    assert body["code"] == "internal_error"
    request_id = response.headers["X-Request-ID"]
    assert body["request_id"] == request_id
    errors = [r for r in caplog.records if r.getMessage() == "unhandled error"]
    assert len(errors) == 1
    assert errors[0].request_id == request_id  # type: ignore[attr-defined]
    assert errors[0].exc_info is not None


async def test_one_structured_log_line_per_request(
    client: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="runplane.http"):
        first = await client.get("/healthz")
        await client.get("/v1/missing")
    lines = [r for r in caplog.records if r.getMessage() == "request"]
    assert len(lines) == 2
    ok, missing = lines
    assert (ok.method, ok.path, ok.status) == ("GET", "/healthz", 200)  # type: ignore[attr-defined]
    assert ok.request_id == first.headers["X-Request-ID"]  # type: ignore[attr-defined]
    assert ok.bytes == 2 and ok.duration_ms >= 0  # type: ignore[attr-defined]
    assert (missing.path, missing.status) == ("/v1/missing", 404)  # type: ignore[attr-defined]


async def test_incoming_request_id_is_kept_and_unsafe_one_replaced(client: Any) -> None:
    kept = await client.get("/healthz", headers={"X-Request-ID": "trace-abc.123"})
    assert kept.headers["X-Request-ID"] == "trace-abc.123"
    replaced = await client.get("/healthz", headers={"X-Request-ID": "bad id\twith spaces"})
    assert replaced.headers["X-Request-ID"].startswith("req_")


async def test_lifespan_stops_actor_tree_and_closes_store(
    make_settings: Callable[..., Settings],
) -> None:
    application: QuartTrio = create_app(make_settings())
    async with application.test_app():
        assert (await application.test_client().get("/healthz")).status_code == 200
        services = application.extensions["runplane"]
        assert services.root.supervisor.running
    assert not services.root.supervisor.running
    with pytest.raises(StoreClosedError):
        await services.store.fetchone("SELECT 1 AS one")
