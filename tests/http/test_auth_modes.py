"""The three modes: off (anonymous sees everything, tokens still apply), shadow (logs what
required would refuse, allows it) and required (anonymous 401 except public routes)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, bearer, mint, ok_json

SHADOW_MSG = "auth shadow: required mode would refuse this request"


def app_fixture(mode: str) -> Any:
    @pytest.fixture
    async def fixture(make_settings: Callable[..., Settings]) -> AsyncIterator[QuartTrio]:
        app = create_app(make_settings(auth=mode))
        async with app.test_app():
            yield app

    return fixture


shadow = app_fixture("shadow")
required = app_fixture("required")


async def test_off_anonymous_sees_every_org_and_creates_in_default(client: Any) -> None:
    acme = await mint(client, subject="a", org_id="org_acme", role="member")
    beta = await mint(client, subject="b", org_id="org_beta", role="member")
    job_a = await ok_json(
        await client.post("/v1/jobs", json={"stack": "shell"}, headers=bearer(acme["token"])), 202
    )
    job_b = await ok_json(
        await client.post("/v1/jobs", json={"stack": "shell"}, headers=bearer(beta["token"])), 202
    )
    anon_job = await ok_json(await client.post("/v1/jobs", json={"stack": "shell"}), 202)
    assert (job_a["org_id"], job_b["org_id"], anon_job["org_id"]) == (
        "org_acme",
        "org_beta",
        "org_default",
    )
    everything = await ok_json(await client.get("/v1/jobs"), 200)
    assert {j["job_id"] for j in everything} == {
        job_a["job_id"],
        job_b["job_id"],
        anon_job["job_id"],
    }
    # a token narrows reads to its org even in an open deploy
    mine = await ok_json(await client.get("/v1/jobs", headers=bearer(acme["token"])), 200)
    assert [j["job_id"] for j in mine] == [job_a["job_id"]]
    assert (
        await client.get(f"/v1/jobs/{job_b['job_id']}", headers=bearer(acme["token"]))
    ).status_code == 404
    # and a real token lacking the scope is 403 in an open deploy too (spec)
    viewer = await mint(client, subject="v", org_id="org_acme", role="viewer")
    refused = await client.post(
        "/v1/jobs", json={"stack": "shell"}, headers=bearer(viewer["token"])
    )
    assert refused.status_code == 403
    assert (await refused.get_json())["code"] == "missing_scope"


async def test_off_manage_and_admin_still_need_credentials(client: Any) -> None:
    assert (await client.get("/v1/admin/audit")).status_code == 401
    assert (await client.get("/v1/nodes/join-tokens")).status_code == 401
    assert (await client.get("/v1/admin/audit", headers=ADMIN_H)).status_code == 200


async def test_required_anonymous(required: QuartTrio) -> None:
    client = required.test_client()
    for path in ("/v1/jobs", "/v1/nodes", "/v1/stacks", "/v1/jobs/job_x"):
        response = await client.get(path)
        assert response.status_code == 401, path
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert (await response.get_json())["code"] == "unauthorized"
    assert (await client.post("/v1/jobs", json={"stack": "shell"})).status_code == 401
    for path in ("/healthz", "/v1/healthz", "/v1/auth/whoami", "/v1/roles"):
        assert (await client.get(path)).status_code == 200, path
    # a bad credential is refused on a public route too (tests/http/test_invalid_credentials.py)
    bad = await client.get("/v1/auth/whoami", headers=bearer("rpt_junk"))
    assert bad.status_code == 401 and (await bad.get_json())["code"] == "unauthorized"
    # unknown paths still 404 (routing, not auth)
    assert (await client.get("/v1/nothing-here")).status_code == 404


async def test_shadow_logs_and_allows(shadow: QuartTrio, caplog: pytest.LogCaptureFixture) -> None:
    client = shadow.test_client()
    with caplog.at_level(logging.INFO):
        listed = await client.get("/v1/jobs")
        submitted = await client.post("/v1/jobs", json={"stack": "shell"})
        health = await client.get("/healthz")
    assert listed.status_code == 200 and submitted.status_code == 202 and health.status_code == 200
    records = [r for r in caplog.records if r.getMessage() == SHADOW_MSG]
    assert [(r.route, r.principal, r.status) for r in records] == [  # type: ignore[attr-defined]
        ("GET /v1/jobs", "anonymous", 401),
        ("POST /v1/jobs", "anonymous", 401),
    ]
    assert all("required" in r.reason for r in records)  # type: ignore[attr-defined]
    assert records[0].levelno == logging.WARNING


async def test_shadow_never_refuses_more_than_off(
    shadow: QuartTrio, caplog: pytest.LogCaptureFixture
) -> None:
    client = shadow.test_client()
    member = await mint(client, subject="m", org_id="org_acme", role="member")
    viewer = await mint(client, subject="v", org_id="org_acme", role="viewer")
    with caplog.at_level(logging.INFO):
        ok = await client.post("/v1/jobs", json={"stack": "shell"}, headers=bearer(member["token"]))
        scope = await client.post(
            "/v1/jobs", json={"stack": "shell"}, headers=bearer(viewer["token"])
        )
        admin = await client.get("/v1/nodes/join-tokens")
    # what off refuses, shadow refuses; what off allows for a real token, it logs nothing
    assert (ok.status_code, scope.status_code, admin.status_code) == (202, 403, 401)
    assert not [r for r in caplog.records if r.getMessage() == SHADOW_MSG]
    for secret in (member["token"], viewer["token"]):
        assert secret not in caplog.text


async def test_query_token_is_ignored_off_the_events_route(required: QuartTrio) -> None:
    client = required.test_client()
    token = await mint(client, subject="m", role="member")
    assert (await client.get(f"/v1/jobs?token={token['token']}")).status_code == 401
    assert (await client.get("/v1/jobs", headers=bearer(token["token"]))).status_code == 200


async def test_login_token_is_not_a_bearer(required: QuartTrio) -> None:
    client = required.test_client()
    seated = await ok_json(
        await client.post("/v1/auth/seat", json={"email": "x@example.com"}, headers=ADMIN_H), 201
    )
    response = await client.get("/v1/jobs", headers=bearer(seated["login_token"]))
    assert response.status_code == 401
    assert "exchange it" in (await response.get_json())["detail"]
