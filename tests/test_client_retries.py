"""The Python client (and so the CLI) retries what is safe to repeat (docs/cli.md
"Retries"): a submit answered 503/502 with Retry-After (an HA takeover: ``no_leader``,
``leader_lost``) is sent again with the same Idempotency-Key; a 503 without Retry-After
(an area switched off) and a POST without a key are not. Against a real HTTP server on
loopback that answers from a script."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

import h11
import pytest
import trio

from runplane.client import ApiError, Client
from tests.h11_server import answer, read_request

RETRY = [("Retry-After", "0")]


async def serve(
    nursery: trio.Nursery, script: list[tuple[int, list[tuple[str, str]], Any]]
) -> tuple[str, list[dict[str, str]]]:
    answers = deque(script)
    seen: list[dict[str, str]] = []

    async def handle(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        async with stream:
            request = await read_request(stream, conn)
            if request is None:
                return
            seen.append(request.headers)
            status, headers, body = answers.popleft()
            payload = json.dumps(body).encode()
            await answer(
                stream, conn, status, payload, [*headers, ("Content-Type", "application/json")]
            )

    listeners = await nursery.start(trio.serve_tcp, handle, 0)
    return f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}", seen


async def test_a_submit_is_sent_again_with_the_same_idempotency_key(nursery: trio.Nursery) -> None:
    url, seen = await serve(
        nursery,
        [
            (503, RETRY, {"code": "no_leader", "detail": "no replica leads right now"}),
            (502, RETRY, {"code": "leader_lost", "detail": "the leader went away"}),
            (202, [], {"job_id": "job_1"}),
        ],
    )

    def submit() -> Any:
        with Client(url) as rp:
            return rp.submit({"stack": "shell", "command": ["true"]})

    assert await trio.to_thread.run_sync(submit) == {"job_id": "job_1"}
    keys = [headers.get("idempotency-key") for headers in seen]
    assert len(keys) == 3 and keys[0] and len(set(keys)) == 1, keys


async def test_what_is_not_safe_to_repeat_is_answered_at_once(nursery: trio.Nursery) -> None:
    url, seen = await serve(
        nursery,
        [
            (503, [], {"code": "feature_disabled", "detail": "pipelines are switched off"}),
            (503, RETRY, {"code": "no_leader", "detail": "no replica leads right now"}),
        ],
    )

    def calls() -> list[int]:
        codes = []
        with Client(url) as rp:
            for method, path in (("GET", "/v1/pipelines"), ("POST", "/v1/jobs/job_1/cancel")):
                with pytest.raises(ApiError) as refused:
                    rp.request(method, path)
                codes.append(refused.value.status)
        return codes

    assert await trio.to_thread.run_sync(calls) == [503, 503]
    assert len(seen) == 2  # neither was sent twice
