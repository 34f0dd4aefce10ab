"""The Python client (and so the CLI) after a 429 (docs/cli.md "Retries"): over a rate
limit (``rate_limited``, with Retry-After) nothing was done, so any request is sent again,
a POST without an Idempotency-Key included; a quota's 429 (no Retry-After) is answered at
once. Against a real HTTP server on loopback that answers from a script."""

from __future__ import annotations

import pytest
import trio

from runplane.client import ApiError, Client
from tests.test_client_retries import RETRY, serve

LIMITED = {"code": "rate_limited", "detail": "too many requests from token tok_1; retry after 1 s"}


async def test_a_rate_limited_request_is_sent_again(nursery: trio.Nursery) -> None:
    url, seen = await serve(
        nursery,
        [(429, RETRY, LIMITED), (429, RETRY, LIMITED), (200, [], {"cancelled": "job_1"})],
    )

    def cancel() -> object:
        with Client(url) as rp:
            return rp.request("POST", "/v1/jobs/job_1/cancel")

    assert await trio.to_thread.run_sync(cancel) == {"cancelled": "job_1"}
    assert len(seen) == 3


async def test_a_quota_429_is_answered_at_once(nursery: trio.Nursery) -> None:
    quota = {"code": "quota_exceeded", "detail": "org_default runs 100 of 100"}
    url, seen = await serve(nursery, [(429, [], quota)])

    def submit() -> ApiError:
        with Client(url) as rp, pytest.raises(ApiError) as refused:
            rp.submit({"stack": "shell", "command": ["true"]})
        return refused.value

    refused = await trio.to_thread.run_sync(submit)
    assert (refused.status, refused.code, len(seen)) == (429, "quota_exceeded", 1)
    assert "concurrency limit" in refused.hint()
    limited = ApiError(429, LIMITED["detail"], dict(LIMITED))
    assert "slow down" in limited.hint()
