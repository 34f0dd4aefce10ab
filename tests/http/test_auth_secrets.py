"""No secret ever appears in a list view, a log line, an audit row or a stored row.

One scenario issues every kind of secret this issue creates (access token, login token,
session token) plus a join token, uses them (bearer, ?token=, revoked, logged out, shadow
mode), then greps every list view, every captured log line (formatted as the server writes
them, extra fields included), the audit rows and every table of the database."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest

from runplane.http.app import create_app
from runplane.logs import JsonFormatter
from runplane.settings import Settings
from tests.auth.support import ADMIN, ADMIN_H, bearer, exchange, mint, ok_json, seat, store_of


@pytest.mark.parametrize("mode", ["required", "shadow"])
async def test_no_secret_anywhere(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture, mode: str
) -> None:
    app = create_app(make_settings(auth=mode))
    secrets: list[str] = [ADMIN]
    views: list[Any] = []
    with caplog.at_level(logging.DEBUG):
        async with app.test_app():
            client = app.test_client()
            store = store_of(app)
            seated = await seat(client, "ann@example.com", "Ann")
            secrets.append(seated["login_token"])
            session = (await exchange(client, seated["login_token"]))["session_token"]
            secrets.append(session)
            s = bearer(session)
            org = await ok_json(
                await client.post("/v1/orgs", json={"name": "Acme"}, headers=s), 201
            )
            added = await ok_json(
                await client.post(
                    f"/v1/orgs/{org['id']}/members", json={"email": "bo@example.com"}, headers=s
                ),
                201,
            )
            secrets.append(added["login_token"])
            token = await mint(client, subject="ci", org_id=org["id"], role="member")
            viewer = await mint(client, subject="v", org_id=org["id"], role="viewer")
            secrets += [token["token"], viewer["token"]]
            join = await ok_json(
                await client.post("/v1/nodes/join-tokens", json={}, headers=ADMIN_H), 201
            )
            secrets.append(join["token"])
            t = bearer(token["token"])
            job = await ok_json(
                await client.post("/v1/jobs", json={"stack": "shell"}, headers=t), 202
            )
            await client.post(f"/v1/jobs/{job['job_id']}/cancel", headers=t)
            await client.get(f"/v1/jobs/{job['job_id']}/events?token={token['token']}")
            await client.post("/v1/jobs", json={"stack": "shell"}, headers=bearer(viewer["token"]))
            await client.get("/v1/jobs")  # anonymous: shadow logs it
            await client.delete(f"/v1/auth/tokens/{token['id']}", headers=ADMIN_H)
            await client.get("/v1/jobs", headers=t)  # revoked: 401
            await client.get(f"/v1/jobs?token={viewer['token']}")  # ?token= not accepted here
            await client.post("/v1/auth/token", json={"token": seated["login_token"]})  # used
            for path, headers in [
                ("/v1/auth/tokens", ADMIN_H),
                ("/v1/nodes/join-tokens", ADMIN_H),
                ("/v1/admin/audit", ADMIN_H),
                ("/v1/admin/audit", s),
                ("/v1/orgs", s),
                (f"/v1/orgs/{org['id']}/members", s),
                ("/v1/jobs", ADMIN_H),
                ("/v1/nodes", ADMIN_H),
                ("/v1/auth/whoami", s),
                ("/v1/auth/whoami", ADMIN_H),
                ("/v1/auth/whoami", bearer(viewer["token"])),
            ]:
                response = await client.get(path, headers=headers)
                assert response.status_code == 200, (path, await response.get_data())
                views.append((path, await response.get_data(as_text=True)))
            await client.post("/v1/auth/logout", headers=s)
            await client.get("/v1/jobs", headers=s)  # logged out: 401
            tables = await store.fetchall(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
            dump = {t["name"]: await store.fetchall(f'SELECT * FROM "{t["name"]}"') for t in tables}
    assert {"access_tokens", "login_tokens", "login_sessions", "audit_log"} <= set(dump)
    assert dump["audit_log"], "the scenario recorded audit rows"
    formatter = JsonFormatter()
    log_lines = [formatter.format(record) for record in caplog.records]
    if mode == "shadow":
        assert any("would refuse" in line for line in log_lines)
    for secret in secrets:
        assert secret and len(secret) > 20
        for path, text in views:
            assert secret not in text, f"secret in list view {path}"
        for line in log_lines:
            assert secret not in line, f"secret in log line {line[:200]}"
        for table, rows in dump.items():
            assert secret not in str(rows), f"secret stored in table {table}"
