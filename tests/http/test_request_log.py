"""The request log line: status as answered, 500 for a request that ended without an
answer, 499 with ``client_gone`` when the client went away first (no traceback either
way)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from runplane.http.middleware import RequestLogMiddleware


async def _call(app: Any, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0)

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/x",
        "headers": [],
        "client": ("1.2.3.4", 5),
    }
    await RequestLogMiddleware(app)(scope, receive, send)
    return sent


def _logged(caplog: pytest.LogCaptureFixture) -> dict[str, Any]:
    records = [r for r in caplog.records if r.name == "runplane.http" and r.msg == "request"]
    assert len(records) == 1
    return records[0].__dict__


async def test_an_answered_request_logs_its_status(caplog: pytest.LogCaptureFixture) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await receive()
        await send({"type": "http.response.start", "status": 201, "headers": []})
        await send({"type": "http.response.body", "body": b"abc"})

    with caplog.at_level(logging.INFO, logger="runplane.http"):
        sent = await _call(app, [{"type": "http.request", "body": b"{}"}])
    assert sent[0]["status"] == 201
    assert any(h[0] == b"x-request-id" for h in sent[0]["headers"])
    line = _logged(caplog)
    assert (line["status"], line["bytes"], line["remote"]) == (201, 3, "1.2.3.4")
    assert "client_gone" not in line


async def test_a_client_gone_mid_body_is_499_not_500(caplog: pytest.LogCaptureFixture) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass  # the body never completes: the client disconnects

    with caplog.at_level(logging.INFO, logger="runplane.http"):
        sent = await _call(
            app,
            [
                {"type": "http.request", "body": b"{", "more_body": True},
                {"type": "http.disconnect"},
            ],
        )
    assert sent == []
    line = _logged(caplog)
    assert line["status"] == 499 and line["client_gone"] is True


async def test_a_request_that_ended_without_an_answer_is_500(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        return None  # ended without a response (a bug)

    with caplog.at_level(logging.INFO, logger="runplane.http"):
        await _call(app, [{"type": "http.request", "body": b""}])
    assert _logged(caplog)["status"] == 500
