"""``/v1/webhooks`` over the app: validation in the conventions' order, the egress guard at
create, the secret shown once and sealed at rest, tenancy, delete, ping, 503 when off.
Deliveries themselves: tests/actors/test_webhook_dispatch.py and the e2e tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, build_world, store_of

HOOK = "http://127.0.0.1:9/hook"


@pytest.fixture
async def guarded(make_settings: Callable[..., Settings]) -> AsyncIterator[QuartTrio]:
    """RUNPLANE_AUTH=required, loopback allowed by CIDR (nothing else internal)."""
    app = create_app(make_settings(auth="required", egress_allow="127.0.0.0/8"))
    async with app.test_app():
        yield app


async def problem(response: Any) -> dict[str, Any]:
    body = await response.get_json()
    assert response.headers["Content-Type"].startswith("application/problem+json")
    return dict(body)


async def test_create_validates_in_order_and_shows_the_secret_once(guarded: QuartTrio) -> None:
    client = guarded.test_client()
    world = await build_world(client, store_of(guarded))
    owner = world.headers("org_admin")
    # another org: 403 before the body is looked at
    other = await client.post("/v1/webhooks", json={"org_id": world.org_b}, headers=owner)
    assert other.status_code == 403
    missing = await client.post("/v1/webhooks", json={}, headers=owner)
    assert missing.status_code == 400
    assert (await problem(missing))["errors"][0]["key"] == "url"
    for url in [
        "ftp://example.com/x",
        "http://user:pw@example.com/",
        "http://example.com:99999/",
    ]:
        bad = await client.post("/v1/webhooks", json={"url": url}, headers=owner)
        assert bad.status_code == 400, url
        body = await problem(bad)
        assert body["errors"][0]["key"] == "url", body
    unknown = await client.post(
        "/v1/webhooks", json={"url": HOOK, "events": ["run.started"]}, headers=owner
    )
    assert unknown.status_code == 400
    assert (await problem(unknown))["errors"][0]["key"] == "events"
    admin = await client.post("/v1/webhooks", json={"url": HOOK}, headers=ADMIN_H)
    assert admin.status_code == 400  # the admin token names the org
    assert (await problem(admin))["errors"][0]["key"] == "org_id"

    made = await client.post("/v1/webhooks", json={"url": HOOK}, headers=owner)
    assert made.status_code == 201
    created = await made.get_json()
    assert created["id"].startswith("wh_") and created["org_id"] == world.org_a
    assert created["events"] == ["run.succeeded", "run.failed", "run.cancelled"]
    secret = created["secret"]
    assert secret.startswith("whsec_") and "secret" in created["note"]
    listed = await (await client.get("/v1/webhooks", headers=owner)).get_json()
    assert [w["id"] for w in listed] == [created["id"]]
    assert "secret" not in listed[0] and secret not in str(listed)
    # sealed at rest: the secret is nowhere in the row
    row = await store_of(guarded).fetchone(
        "SELECT * FROM webhook_endpoints WHERE id = ?", (created["id"],)
    )
    assert row is not None and secret not in str(dict(row))
    assert secret.removeprefix("whsec_") not in str(dict(row))


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://localhost:9/", "loopback"),  # a name: refused after resolving it
        ("http://169.254.169.254/latest/meta-data", "metadata"),
        ("http://10.1.2.3/hook", "private"),
        ("http://100.64.0.7/hook", "CGNAT"),
        ("http://[::1]:9/", "loopback"),
        ("http://[::ffff:10.0.0.1]/", "private"),
    ],
)
async def test_internal_targets_are_refused_at_create(
    make_settings: Callable[..., Settings], url: str, says: str
) -> None:
    app = create_app(make_settings(auth="required"))
    async with app.test_app():
        client = app.test_client()
        response = await client.post(
            "/v1/webhooks", json={"url": url, "org_id": "org_default"}, headers=ADMIN_H
        )
        assert response.status_code == 400
        body = await problem(response)
        assert body["code"] == "egress_refused"
        assert says in body["detail"] and "RUNPLANE_EGRESS_ALLOW" in body["detail"]
        assert body["errors"][0]["key"] == "url"


async def test_allowed_internal_targets_and_tenancy(guarded: QuartTrio, tmp_path: Path) -> None:
    client = guarded.test_client()
    world = await build_world(client, store_of(guarded))
    owner, stranger = world.headers("org_admin"), world.headers("wrong_org")
    made = await client.post("/v1/webhooks", json={"url": HOOK}, headers=owner)
    assert made.status_code == 201  # 127.0.0.0/8 is allowed here
    hook = (await made.get_json())["id"]
    # another org's manager: its list is empty, the id is unknown
    assert await (await client.get("/v1/webhooks", headers=stranger)).get_json() == []
    for method, path in [
        ("DELETE", f"/v1/webhooks/{hook}"),
        ("POST", f"/v1/webhooks/{hook}/test"),
        ("GET", f"/v1/webhooks/{hook}/deliveries"),
    ]:
        assert (await client.open(path, method=method, headers=stranger)).status_code == 404
    # the admin token sees all orgs, or one with ?org=
    every = await (await client.get("/v1/webhooks", headers=ADMIN_H)).get_json()
    assert [w["id"] for w in every] == [hook]
    assert (
        await (await client.get(f"/v1/webhooks?org={world.org_b}", headers=ADMIN_H)).get_json()
        == []
    )
    # a member (not a manager) may not touch them
    assert (await client.get("/v1/webhooks", headers=world.headers("member"))).status_code == 403

    ping = await client.post(f"/v1/webhooks/{hook}/test", headers=owner)
    assert ping.status_code == 202
    queued = await ping.get_json()
    assert queued["status"] == "queued" and queued["delivery_id"].startswith("dlv_")
    listed = await (await client.get(f"/v1/webhooks/{hook}/deliveries", headers=owner)).get_json()
    assert [d["id"] for d in listed] == [queued["delivery_id"]]
    assert listed[0]["event"] == "ping" and listed[0]["endpoint_id"] == hook

    gone = await client.delete(f"/v1/webhooks/{hook}", headers=owner)
    assert gone.status_code == 200 and await gone.get_json() == {"deleted": hook}
    assert (await client.get(f"/v1/webhooks/{hook}/deliveries", headers=owner)).status_code == 404
    assert (await client.delete(f"/v1/webhooks/{hook}", headers=owner)).status_code == 404
    audit = await (await client.get("/v1/admin/audit", headers=ADMIN_H)).get_json()
    actions = [a["action"] for a in audit if a["resource_id"] == hook]
    assert sorted(actions) == ["webhooks:create", "webhooks:delete", "webhooks:test"]
    assert all("whsec_" not in str(a) for a in audit)


async def test_switched_off_is_503(make_settings: Callable[..., Settings]) -> None:
    app = create_app(make_settings(disable="webhooks"))
    async with app.test_app():
        client = app.test_client()
        for method, path in [
            ("POST", "/v1/webhooks"),
            ("GET", "/v1/webhooks"),
            ("DELETE", "/v1/webhooks/wh_x"),
            ("POST", "/v1/webhooks/wh_x/test"),
            ("GET", "/v1/webhooks/wh_x/deliveries"),
        ]:
            response = await client.open(path, method=method, json={}, headers=ADMIN_H)
            assert response.status_code == 503, path
            assert "RUNPLANE_DISABLE" in (await response.get_json())["detail"]
