"""A present but invalid ``Authorization`` header is a 401 in every auth mode, on every
route, the public ones (``whoami``) included (issue 37, docs/auth.md): another scheme, a
bare word, an empty bearer, a token this server did not issue. The detail never repeats
the header. The routes that read the credential themselves (metrics, the git proxy,
logout, the agents' WebSocket) still get it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from quart.testing.connections import WebsocketDisconnectError

from runplane.auth.rules import WEBSOCKET
from runplane.http.app import create_app
from runplane.http.openapi.route_doc import declared_routes
from runplane.settings import Settings
from tests.http.conftest import ADMIN

INVALID = (
    "Basic Zm9vOmJhcg==",
    "garbage",
    "Token abc",
    "Bearer ",
    "Bearer",
    "Bearer rpt_not_a_token_we_issued",
    "Bearer some-random-secret",
    "rpt_sent_without_the_scheme",
)

#: Public routes (and a read) an invalid credential is refused on.
ROUTES = ("/v1/auth/whoami", "/v1/roles", "/healthz", "/openapi.json", "/", "/v1/jobs")


@pytest.mark.parametrize("mode", ["off", "shadow", "required"])
async def test_an_invalid_authorization_is_401_in_every_mode(
    make_settings: Callable[..., Settings], mode: str
) -> None:
    app = create_app(make_settings(auth=mode))
    async with app.test_app():
        client = app.test_client()
        for header in INVALID:
            for route in ROUTES:
                response = await client.get(route, headers={"Authorization": header})
                assert response.status_code == 401, (mode, header, route)
                assert response.headers["WWW-Authenticate"] == "Bearer"
                body = await response.get_json()
                assert body["code"] == "unauthorized"
                secret = header.partition(" ")[2] or header
                assert not secret.strip() or secret.strip() not in body["detail"], body
        # a valid credential and none at all still pass where they did
        me = await client.get("/v1/auth/whoami", headers={"Authorization": f"Bearer {ADMIN}"})
        assert (await me.get_json())["superuser"] is True
        anonymous = await client.get("/v1/auth/whoami")
        assert anonymous.status_code == 200
        assert (await anonymous.get_json())["kind"] == "anon"


async def test_the_detail_says_why(client: Any) -> None:
    scheme = await client.get("/v1/auth/whoami", headers={"Authorization": "Basic Zm9v"})
    assert "not 'Bearer <token>'" in (await scheme.get_json())["detail"]
    empty = await client.get("/v1/auth/whoami", headers={"Authorization": "Bearer  "})
    assert "empty" in (await empty.get_json())["detail"]
    unknown = await client.get("/v1/auth/whoami", headers={"Authorization": "Bearer nope"})
    assert "not a token this server issued" in (await unknown.get_json())["detail"]


async def test_routes_that_read_the_credential_still_get_it(client: Any) -> None:
    garbage = {"Authorization": "garbage"}
    # metrics: an open deploy lets any scraper in (it checks its own token when required)
    assert (await client.get("/metrics", headers=garbage)).status_code == 200
    # the git proxy reads an agent's fetch ticket as Basic: its own 401, with its challenge
    refs = await client.get(
        "/v1/git/proxy/gc_x/info/refs?service=git-upload-pack",
        headers={"Authorization": "Basic cnVucGxhbmU6bm9wZQ=="},
    )
    assert refs.status_code == 401
    assert refs.headers["WWW-Authenticate"].startswith("Basic")
    # logout is 204 for any bearer (idempotent)
    for header in ("Bearer rps_ended_long_ago", "garbage"):
        logout = await client.post("/v1/auth/logout", headers={"Authorization": header})
        assert logout.status_code == 204, header
    # the agents' WebSocket authenticates its hello, whatever the headers say
    async with client.websocket("/v1/nodes/connect", headers=garbage) as ws:
        await ws.send("not a hello")
        with pytest.raises(WebsocketDisconnectError) as closed:
            await ws.receive()
    assert closed.value.args[0] == 4400


async def test_an_invalid_credential_on_an_admin_route_is_401(client: Any) -> None:
    for route in ("/v1/auth/tokens", "/v1/nodes/join-tokens", "/v1/admin/channel-target"):
        response = await client.get(route, headers={"Authorization": "Token abc"})
        assert response.status_code == 401, route
        assert "not valid" in (await response.get_json())["detail"]


async def test_every_route_refuses_an_invalid_authorization(client: Any, app: Any) -> None:
    """Each route the app serves (its path parameters filled with a placeholder), with a
    header that is not a bearer: 401 before the route runs, but where the rule leaves the
    credential to the handler."""
    checked, left = 0, []
    for declared in declared_routes(app):
        if declared.method == WEBSOCKET or declared.route is None:
            continue
        url = re.sub(r"<(?:[a-z]+:)?\w+>", "x", declared.rule)
        response = await client.open(
            url, method=declared.method, headers={"Authorization": "Token abc"}
        )
        if declared.route.rule.reads_credential:
            left.append(f"{declared.method} {declared.rule}")
            continue
        assert response.status_code == 401, (declared.method, declared.rule)
        checked += 1
    assert checked > 90
    assert sorted(left) == [
        "GET /metrics",
        "GET /v1/git/proxy/<connection_id>/info/refs",
        "POST /v1/auth/logout",
        "POST /v1/git/proxy/<connection_id>/git-upload-pack",
    ]
