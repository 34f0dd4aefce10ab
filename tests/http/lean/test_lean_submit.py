"""The lean lanes of ``POST /v1/jobs`` and ``POST /v1/jobs/batch`` (docs/lean-lanes.md)
answer byte for byte what Quart answers: two servers on real sockets, one with the lanes
(the default) and one with ``RUNPLANE_LEAN_LANES=0``, get the same requests; their answers
must be the same status, the same headers in the same order (but ``Date``) and the same
body once the ids and times each server mints are masked. Each case also says which
lane answered it on the lean server: the lane itself, or Quart after a hand-off."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from hypercorn.trio import serve

from runplane.http import serving
from runplane.http.app import create_app
from runplane.http.lean import json_lane
from runplane.settings import load_settings

ADMIN = "lean-lanes-admin-token-0123456789"
MINTED = re.compile(
    rb"\b(?:job|arr|tok|evt|aud)_[0-9a-z]{26}\b|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z"
)

#: A queued job's wait reason in a submit's answer is placement's, best effort: it is
#: there when placement planned between the job's enqueue and the ask for it. That is timing,
#: not the lane (the lean lane, being faster, asks sooner), so it is left out.
WAIT_REASON = re.compile(rb',"wait_reason":"(?:[^"\\]|\\.)*"')


@dataclass
class Pair:
    lean: httpx.AsyncClient
    quart: httpx.AsyncClient
    answered: list[str]  # the paths the lean lanes answered themselves, in order

    async def both(
        self, path: str, *, token: tuple[str, str] | None = None, **kw: Any
    ) -> tuple[httpx.Response, httpx.Response]:
        """Send the same request to both servers (``token``: each server's own bearer)."""
        headers = {"X-Request-ID": "req_same_for_both", **kw.pop("headers", {})}
        out = []
        for client, bearer in zip((self.lean, self.quart), token or (None, None), strict=True):
            sent = {**headers, **({"Authorization": f"Bearer {bearer}"} if bearer else {})}
            out.append(await client.post(path, headers=sent, **kw))
        return out[0], out[1]

    async def same(self, path: str, *, lane: bool, **kw: Any) -> httpx.Response:
        """Both answers alike; ``lane``: whether the lean lane (not Quart) answered."""
        before = len(self.answered)
        lean, quart = await self.both(path, **kw)
        assert lean.status_code == quart.status_code, (lean.text, quart.text)
        assert _head(lean) == _head(quart), (_head(lean), _head(quart))
        assert _masked(lean) == _masked(quart)
        assert len(self.answered) - before == (1 if lane else 0), (path, lean.text)
        return lean


def _masked(response: httpx.Response) -> bytes:
    return WAIT_REASON.sub(b"", MINTED.sub(b"<minted>", response.content))


def _head(response: httpx.Response) -> list[tuple[bytes, bytes]]:
    """The headers but ``Date``, and ``Content-Length`` checked against the body instead
    (a Job's wait reason is timing: see :data:`WAIT_REASON`)."""
    length = response.headers.get("content-length")
    assert length is not None and int(length) == len(response.content)
    skip = (b"date", b"content-length")
    return [(k, v) for k, v in response.headers.raw if k.lower() not in skip]


async def _serve(nursery: trio.Nursery, tmp: Path, lean: bool, env: dict[str, str]) -> str:
    settings = load_settings(
        {
            "RUNPLANE_DATA_DIR": str(tmp / ("lean" if lean else "quart")),
            "RUNPLANE_LOCAL_AGENT": "0",
            "RUNPLANE_ADMIN_TOKEN": ADMIN,
            "RUNPLANE_LEAN_LANES": "1" if lean else "0",
            **env,
        }
    )
    config = serving.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    app: Any = create_app(settings)
    binds = await nursery.start(partial(serve, app, config, shutdown_trigger=trio.sleep_forever))
    return str(binds[0])


@pytest.fixture
def pair_of(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[..., Any]:
    answered: list[str] = []
    original = json_lane.JsonLane._answer

    async def observed(self: Any, svc: Any, body: Any, caller: Any, where: Any) -> Any:
        answered.append(where.path)
        return await original(self, svc, body, caller, where)

    monkeypatch.setattr(json_lane.JsonLane, "_answer", observed)

    async def make(**env: str) -> Pair:
        env = {f"RUNPLANE_{k.upper()}": v for k, v in env.items()}
        urls = [await _serve(nursery, tmp_path, lean, env) for lean in (True, False)]
        clients = [httpx.AsyncClient(base_url=url, timeout=30) for url in urls]
        return Pair(clients[0], clients[1], answered)

    return make


@pytest.fixture
async def open_pair(pair_of: Callable[..., Any]) -> AsyncIterator[Pair]:
    pair: Pair = await pair_of()
    yield pair
    await pair.lean.aclose()
    await pair.quart.aclose()


SHELL = {"stack": "shell", "command": ["echo", "hi"], "seed": 7}


async def test_a_submit_and_a_batch_are_the_same_on_both_lanes(open_pair: Pair) -> None:
    job = await open_pair.same("/v1/jobs", json=SHELL, lane=True)
    assert job.status_code == 202 and job.json()["phase"] == "queued"
    items = [{**SHELL, "seed": n} for n in range(3)]
    array = await open_pair.same("/v1/jobs/batch", json={"jobs": items}, lane=True)
    assert array.status_code == 202 and array.json()["count"] == 3
    sweep = {"job": {"stack": "sim-cartpole", "seed": 1}, "sweep": {"episodes": [1, 2]}}
    assert (await open_pair.same("/v1/jobs/batch", json=sweep, lane=True)).status_code == 202
    partly = {"jobs": [{**SHELL, "config": {"x": 1}}, SHELL], "atomic": False}
    await open_pair.same("/v1/jobs/batch", json=partly, lane=True)


async def test_what_the_route_refuses_is_answered_alike(open_pair: Pair) -> None:
    # raised by the submit itself, answered by the lane
    unknown = await open_pair.same("/v1/jobs", json={"stack": "nope"}, lane=True)
    assert unknown.status_code == 400 and unknown.json()["request_id"] == "req_same_for_both"
    bad = {"jobs": [{"stack": "sim-cartpole", "config": {"episodes": -5}}]}
    assert (await open_pair.same("/v1/jobs/batch", json=bad, lane=True)).status_code == 422
    # the body: handed to Quart before anything was counted or written
    for content in (b"", b"{", b"[]", b'{"stack": "shell", "colour": 1}', b'{"stack": 5}'):
        for path in ("/v1/jobs", "/v1/jobs/batch"):
            answer = await open_pair.same(path, content=content, lane=False)
            assert answer.status_code == 400, (path, content)
    big = b'{"stack": "shell", "pad": "' + b"x" * (1024 * 1024) + b'"}'
    assert (await open_pair.same("/v1/jobs", content=big, lane=False)).status_code == 413
    # a query string and an Idempotency-Key take Quart's path
    assert (await open_pair.same("/v1/jobs?x=1", json=SHELL, lane=False)).status_code == 400
    keyed = {"Idempotency-Key": "k-1"}
    assert (await open_pair.same("/v1/jobs", json=SHELL, headers=keyed, lane=False)).is_success
    spaced = {"Idempotency-Key": "a b"}
    assert (
        await open_pair.same("/v1/jobs", json=SHELL, headers=spaced, lane=False)
    ).status_code == 400


async def test_admission_refusals_are_answered_alike(open_pair: Pair) -> None:
    for client in (open_pair.lean, open_pair.quart):
        put = await client.put(
            "/v1/policy",
            json={"org": {"max_concurrent_org": 2}},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert put.status_code == 200, put.text
    await open_pair.same("/v1/jobs", json=SHELL, lane=True)
    over = await open_pair.same("/v1/jobs/batch", json={"jobs": [SHELL] * 3}, lane=True)
    assert over.status_code == 429 and over.json()["code"] == "quota_exceeded"
    await open_pair.same("/v1/jobs", json=SHELL, lane=True)
    full = await open_pair.same("/v1/jobs", json=SHELL, lane=True)
    assert full.status_code == 429, full.text


async def _token(client: httpx.AsyncClient, role: str) -> str:
    minted = await client.post(
        "/v1/auth/tokens",
        json={"subject": f"{role}-1", "org_id": "org_default", "name": role, "role": role},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert minted.status_code == 201, minted.text
    return str(minted.json()["token"])


async def test_credentials_and_rate_limits_are_answered_alike(
    pair_of: Callable[..., Any],
) -> None:
    pair: Pair = await pair_of(auth="required", rate_limit="1/h,burst=3")
    member = (await _token(pair.lean, "member"), await _token(pair.quart, "member"))
    viewer = (await _token(pair.lean, "viewer"), await _token(pair.quart, "viewer"))
    for path in ("/v1/jobs", "/v1/jobs/batch"):
        body = SHELL if path == "/v1/jobs" else {"jobs": [SHELL]}
        assert (await pair.same(path, json=body, lane=False)).status_code == 401
        wrong = {"Authorization": "Basic dXNlcjpwdw=="}
        assert (await pair.same(path, json=body, headers=wrong, lane=False)).status_code == 401
        unknown = ("rpt_" + "x" * 43, "rpt_" + "x" * 43)
        assert (await pair.same(path, json=body, token=unknown, lane=False)).status_code == 401
        assert (await pair.same(path, json=body, token=viewer, lane=False)).status_code == 403
    # the member's bucket holds 3: the fourth is the 429, rendered by the lane
    for _ in range(3):
        assert (await pair.same("/v1/jobs", json=SHELL, token=member, lane=True)).is_success
    limited = await pair.same("/v1/jobs", json=SHELL, token=member, lane=True)
    assert limited.status_code == 429 and limited.headers["Retry-After"]
    # a refusal of the rule comes before the bucket: still Quart's, still alike
    assert (await pair.same("/v1/jobs", json=SHELL, token=viewer, lane=False)).status_code == 403
    admin = (ADMIN, ADMIN)  # the admin token is never counted
    assert (await pair.same("/v1/jobs", json=SHELL, token=admin, lane=True)).is_success
    await pair.lean.aclose()
    await pair.quart.aclose()


async def test_the_lane_writes_the_same_audit_row(pair_of: Callable[..., Any]) -> None:
    pair: Pair = await pair_of(auth="required")
    member = (await _token(pair.lean, "member"), await _token(pair.quart, "member"))
    await pair.same("/v1/jobs", json=SHELL, token=member, lane=True)
    await pair.same("/v1/jobs/batch", json={"jobs": [SHELL]}, token=member, lane=True)
    rows = []
    for client in (pair.lean, pair.quart):
        audit = await client.get("/v1/admin/audit", headers={"Authorization": f"Bearer {ADMIN}"})
        assert audit.status_code == 200, audit.text
        found = json.loads(MINTED.sub(b"<minted>", audit.content).decode())
        rows.append([r for r in found if r["action"] == "runs:submit"])
    assert rows[0] == rows[1] and len(rows[0]) == 2, rows
    assert {r["ip"] for r in rows[0]} == {"127.0.0.1"}, rows
    await pair.lean.aclose()
    await pair.quart.aclose()
