"""Operator channel targets: route -> actor -> store and back, surviving a restart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runplane.http.app import create_app
from runplane.settings import Settings

from .conftest import ADMIN

AUTH = {"Authorization": f"Bearer {ADMIN}"}


async def test_set_and_get_targets(client: Any) -> None:
    assert (await (await client.get("/v1/admin/channel-target", headers=AUTH)).get_json()) == {}
    response = await client.post(
        "/v1/admin/channel-target", json={"channel": "stable", "version": "1.4.2"}, headers=AUTH
    )
    assert response.status_code == 200
    assert await response.get_json() == {"stable": "1.4.2"}
    await client.post(
        "/v1/admin/channel-target", json={"channel": "beta", "version": "1.5.0-rc1"}, headers=AUTH
    )
    await client.post(
        "/v1/admin/channel-target", json={"channel": "stable", "version": "1.4.3"}, headers=AUTH
    )
    got = await client.get("/v1/admin/channel-target", headers=AUTH)
    assert await got.get_json() == {"stable": "1.4.3", "beta": "1.5.0-rc1"}


async def test_targets_survive_restart(make_settings: Callable[..., Settings]) -> None:
    settings = make_settings()
    first = create_app(settings)
    async with first.test_app():
        response = await first.test_client().post(
            "/v1/admin/channel-target", json={"channel": "stable", "version": "2.0.0"}, headers=AUTH
        )
        assert response.status_code == 200
    second = create_app(settings)
    async with second.test_app():
        got = await second.test_client().get("/v1/admin/channel-target", headers=AUTH)
        assert await got.get_json() == {"stable": "2.0.0"}


async def test_admin_token_required(client: Any) -> None:
    missing = await client.get("/v1/admin/channel-target")
    assert missing.status_code == 401
    assert (await missing.get_json())["code"] == "unauthorized"
    wrong = await client.post(
        "/v1/admin/channel-target",
        json={"channel": "stable", "version": "1"},
        headers={"Authorization": "Bearer not-the-admin-token"},
    )
    assert wrong.status_code == 401


async def test_no_admin_token_configured_is_401(make_settings: Callable[..., Settings]) -> None:
    application = create_app(make_settings(admin_token=""))
    async with application.test_app():
        response = await application.test_client().get("/v1/admin/channel-target", headers=AUTH)
    assert response.status_code == 401
    assert "RUNPLANE_ADMIN_TOKEN" in (await response.get_json())["detail"]


async def test_blank_channel_or_version_is_400(client: Any) -> None:
    response = await client.post(
        "/v1/admin/channel-target", json={"channel": " ", "version": "1.0"}, headers=AUTH
    )
    assert response.status_code == 400
    assert (await response.get_json())["errors"][0]["key"] == "channel"
