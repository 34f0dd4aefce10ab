"""Per-credential request rate limits (docs/operations.md "Rate limits"): the token bucket on
trio's clock, and the HTTP layer's 429 ``rate_limited`` with Retry-After, keyed by access
token, by login session, and by source address for anonymous requests, logins and node
enrollments; nothing is limited with the settings off (or unset on an open deploy)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import trio
from quart.testing.connections import WebsocketDisconnectError
from quart_trio import QuartTrio

from runplane.agent import protocol as p
from runplane.http.app import create_app
from runplane.http.ratelimit import CLOSE_RATE_LIMITED, EXTENSION, Buckets, retry_after
from runplane.settings import RateLimit, Settings
from tests.auth.support import ADMIN_H, bearer, exchange, mint, ok_json, seat

#: one token a minute, three at once: a test's requests never see a refill
SLOW = "1/min,burst=3"


def at(address: str) -> dict[str, Any]:
    """A request from ``address`` (the test client sends none of its own)."""
    return {"scope_base": {"client": (address, 40000)}}


# -- the bucket


async def test_a_bucket_spends_its_burst_then_refills_at_its_rate(autojump_clock: Any) -> None:
    buckets = Buckets(RateLimit(per_sec=2.0, burst=3))
    now = trio.current_time()
    assert [buckets.take("a", now) for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = buckets.take("a", now)
    assert wait == pytest.approx(0.5)
    assert buckets.take("b", now) == 0.0  # another key has its own bucket
    await trio.sleep(wait)
    assert buckets.take("a", trio.current_time()) == 0.0
    assert buckets.take("a", trio.current_time()) == pytest.approx(0.5)
    await trio.sleep(10)  # idle: full again, never more than the burst
    now = trio.current_time()
    assert [buckets.take("a", now) for _ in range(4)][-1] == pytest.approx(0.5)


async def test_a_refused_take_spends_nothing(autojump_clock: Any) -> None:
    buckets = Buckets(RateLimit(per_sec=1.0, burst=1))
    now = trio.current_time()
    assert buckets.take("a", now) == 0.0
    for _ in range(5):  # hammering while empty does not push the refill further out
        assert buckets.take("a", now) == pytest.approx(1.0)
    await trio.sleep(1.0)
    assert buckets.take("a", trio.current_time()) == 0.0


async def test_idle_buckets_are_dropped_and_the_count_is_bounded(autojump_clock: Any) -> None:
    buckets = Buckets(RateLimit(per_sec=1.0, burst=2), max_buckets=100)
    now = trio.current_time()
    for n in range(50):
        buckets.take(f"k{n}", now)
    assert len(buckets) == 50
    await trio.sleep(2.0)  # every one of them is full again: forgetting it changes nothing
    buckets.take("fresh", trio.current_time())
    assert len(buckets) == 1
    now = trio.current_time()
    for n in range(1000):  # more keys at once than it keeps
        buckets.take(f"burst{n}", now)
    assert len(buckets) == 100


def test_retry_after_is_whole_seconds_rounded_up() -> None:
    assert [retry_after(w) for w in (0.001, 0.5, 1.0, 1.2, 59.9)] == [1, 1, 1, 2, 60]


# -- the HTTP layer


@pytest.fixture
async def limited(make_settings: Callable[..., Settings]) -> AsyncIterator[QuartTrio]:
    app = create_app(make_settings(auth="required", rate_limit=SLOW, rate_limit_address=SLOW))
    async with app.test_app():
        yield app


async def _limited_problem(response: Any) -> dict[str, Any]:
    body: dict[str, Any] = await ok_json(response, 429)
    assert body["code"] == "rate_limited"
    assert response.headers["Content-Type"] == "application/problem+json"
    seconds = int(response.headers["Retry-After"])  # whole seconds
    assert 1 <= seconds <= 60
    assert f"retry after {seconds} s" in body["detail"]
    return body


async def test_a_token_over_its_limit_gets_429_and_another_token_does_not(
    limited: QuartTrio,
) -> None:
    client = limited.test_client()
    first = await mint(client, subject="ci-a", org_id="org_acme", role="viewer")
    second = await mint(client, subject="ci-b", org_id="org_acme", role="viewer")
    for _ in range(3):
        await ok_json(await client.get("/v1/jobs", headers=bearer(first["token"])), 200)
    over = await client.get("/v1/jobs", headers=bearer(first["token"]))
    body = await _limited_problem(over)
    assert first["id"] in body["detail"] and "RUNPLANE_RATE_LIMIT" in body["detail"]
    assert first["token"] not in body["detail"]  # the id names it, never the secret
    # a write is refused the same, before it is carried out
    job = await client.post(
        "/v1/jobs", json={"stack": "sim-cartpole"}, headers=bearer(first["token"])
    )
    assert job.status_code == 429 and (await job.get_json())["code"] == "rate_limited"
    for _ in range(3):  # the other token has its own bucket
        await ok_json(await client.get("/v1/jobs", headers=bearer(second["token"])), 200)
    # the operator's admin token is not limited
    for _ in range(10):
        await ok_json(await client.get("/v1/jobs", headers=ADMIN_H), 200)


async def test_a_login_session_has_its_own_bucket(limited: QuartTrio) -> None:
    client = limited.test_client()
    seated = await seat(client, "rate@example.com")
    session = str((await exchange(client, seated["login_token"]))["session_token"])
    for _ in range(3):
        await ok_json(await client.get("/v1/jobs", headers=bearer(session)), 200)
    body = await _limited_problem(await client.get("/v1/jobs", headers=bearer(session)))
    assert "session lgs_" in body["detail"] and session not in body["detail"]


async def test_anonymous_requests_are_keyed_by_address(limited: QuartTrio) -> None:
    client = limited.test_client()
    token = await mint(client, subject="ci", org_id="org_acme", role="viewer")
    for _ in range(3):
        await ok_json(await client.get("/v1/auth/whoami", **at("10.0.0.1")), 200)
    body = await _limited_problem(await client.get("/v1/roles", **at("10.0.0.1")))
    assert "address 10.0.0.1" in body["detail"] and "RUNPLANE_RATE_LIMIT_ADDRESS" in body["detail"]
    # a bad credential from there is counted there too (no guessing at full speed)
    guess = await client.get("/v1/jobs", headers=bearer("rpt_guess"), **at("10.0.0.1"))
    await _limited_problem(guess)
    share = await client.get("/v1/roles", headers={"X-Share-Token": "guess"}, **at("10.0.0.1"))
    await _limited_problem(share)
    share = await client.get("/v1/roles", headers={"X-Share-Token": "guess"}, **at("10.0.0.3"))
    assert share.status_code == 401  # counted, and refused on its merits
    # another address has its own bucket; a credential from the same one its own
    await ok_json(await client.get("/v1/auth/whoami", **at("10.0.0.2")), 200)
    await ok_json(
        await client.get("/v1/jobs", headers=bearer(token["token"]), **at("10.0.0.1")), 200
    )
    # probes and the UI's assets are never counted
    for _ in range(5):
        assert (await client.get("/healthz", **at("10.0.0.1"))).status_code == 200
        assert (await client.get("/", **at("10.0.0.1"))).status_code == 200


async def test_logins_from_one_address_are_limited(limited: QuartTrio) -> None:
    client = limited.test_client()
    for _ in range(3):
        attempt = await client.post(
            "/v1/auth/token", json={"token": "rpl_guessed"}, **at("10.0.0.7")
        )
        assert attempt.status_code == 401
    await _limited_problem(
        await client.post("/v1/auth/token", json={"token": "rpl_guessed"}, **at("10.0.0.7"))
    )
    # a login is counted by address whatever it presents: a credential does not lift it
    token = await mint(client, subject="ci", org_id="org_acme", role="viewer")
    again = await client.post(
        "/v1/auth/token",
        json={"token": "rpl_guessed"},
        headers=bearer(token["token"]),
        **at("10.0.0.7"),
    )
    await _limited_problem(again)
    other = await client.post("/v1/auth/token", json={"token": "rpl_guessed"}, **at("10.0.0.8"))
    assert other.status_code == 401


def _hello(join_token: str | None = None, credential: str | None = None) -> str:
    facts = p.Facts(name="n", cpu_cores=1, ram_gb=1, arch="x86_64", os="linux")
    hello = p.Hello(
        protocol=p.PROTOCOL_VERSION,
        agent_version="0",
        join_token=join_token,
        credential=credential,
        facts=facts,
    )
    return p.encode(hello)


async def _close_code(client: Any, address: str, hello: str) -> int:
    """The close code the agents' WebSocket answers ``hello`` from ``address`` with."""
    async with client.websocket("/v1/nodes/connect", **at(address)) as ws:
        await ws.send(hello)
        with pytest.raises(WebsocketDisconnectError) as closed:
            while True:
                await ws.receive()
    code: int = closed.value.args[0]
    return code


async def test_enrollments_from_one_address_are_limited(limited: QuartTrio) -> None:
    client = limited.test_client()
    refused = [await _close_code(client, "10.0.0.9", _hello("rpj_unknown")) for _ in range(3)]
    assert refused == [p.CLOSE_UNAUTHORIZED] * 3  # each checked, and not valid
    assert await _close_code(client, "10.0.0.9", _hello("rpj_unknown")) == CLOSE_RATE_LIMITED
    # a join token minted by the operator does not lift the limit at that address
    join = await ok_json(await client.post("/v1/nodes/join-tokens", headers=ADMIN_H), 201)
    assert await _close_code(client, "10.0.0.9", _hello(join["token"])) == CLOSE_RATE_LIMITED
    # elsewhere it enrolls; a node's reconnect with its credential is not counted
    async with client.websocket("/v1/nodes/connect", **at("10.0.0.10")) as ws:
        await ws.send(_hello(join["token"]))
        welcome = p.decode_server(await ws.receive())
    assert isinstance(welcome, p.Welcome) and welcome.credential
    unknown = _hello(credential="rpn_not_a_credential")
    assert await _close_code(client, "10.0.0.9", unknown) == p.CLOSE_UNAUTHORIZED


@pytest.mark.parametrize(
    "env",
    [
        {"auth": "required", "rate_limit": "off", "rate_limit_address": "off"},
        {},  # an open deploy: off unless set
        {"auth": "shadow"},
    ],
)
async def test_with_the_limits_off_nothing_is_limited(
    make_settings: Callable[..., Settings], env: dict[str, str]
) -> None:
    app = create_app(make_settings(**env))
    assert app.extensions[EXTENSION] is None
    async with app.test_app():
        client = app.test_client()
        token = await mint(client, subject="ci", org_id="org_acme", role="viewer")
        for _ in range(120):
            anonymous = await client.get("/v1/roles", **at("10.0.0.1"))
            assert anonymous.status_code == 200
            with_token = await client.get("/v1/jobs", headers=bearer(token["token"]))
            assert with_token.status_code == 200
        for _ in range(60):
            login = await client.post(
                "/v1/auth/token", json={"token": "rpl_guessed"}, **at("10.0.0.1")
            )
            assert login.status_code == 401


async def test_auth_required_has_limits_unless_set(
    make_settings: Callable[..., Settings],
) -> None:
    app = create_app(make_settings(auth="required"))
    limiter = app.extensions[EXTENSION]
    assert limiter is not None and limiter.credential is not None and limiter.address is not None
    only_address = create_app(make_settings(auth="required", rate_limit="off"))
    assert only_address.extensions[EXTENSION].credential is None
    opened = create_app(make_settings(rate_limit="10/s"))  # an open deploy that asks for one
    assert opened.extensions[EXTENSION].credential is not None
    assert opened.extensions[EXTENSION].address is None


async def test_the_served_document_lists_429_where_limits_count(
    limited: QuartTrio, make_settings: Callable[..., Settings]
) -> None:
    paths = (await ok_json(await limited.test_client().get("/openapi.json"), 200))["paths"]
    assert "429" in paths["/v1/jobs"]["get"]["responses"]
    assert "429" in paths["/v1/auth/token"]["post"]["responses"]
    assert "429" not in paths["/healthz"]["get"]["responses"]
    assert "429" not in paths["/v1/artifacts/{key}"]["put"]["responses"]
    app = create_app(make_settings(auth="required", rate_limit="off", rate_limit_address="off"))
    async with app.test_app():
        paths = (await ok_json(await app.test_client().get("/openapi.json"), 200))["paths"]
    assert "429" not in paths["/v1/jobs"]["get"]["responses"]
