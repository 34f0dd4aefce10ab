"""``/v1/git/connections`` against a real git server on loopback (``tests/git_server.py``:
git http-backend behind token auth): validation (400/422), status from a real
``ls-remote`` with the token, the egress guard, generated deploy keys, tenancy, and the
token never in an answer, the audit trail, the database file or the logs."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, build_world, store_of
from tests.git_server import GitServer, make_repo

TOKEN = "glpat-very-secret-token-0123456789"


@pytest.fixture
async def git_server(nursery: trio.Nursery, tmp_path: Path) -> GitServer:
    root = tmp_path / "repos"
    root.mkdir()
    make_repo(root, "team/app.git", {"train.py": "print('hi')\n"})
    return await GitServer.start(nursery, root, TOKEN)


@pytest.fixture
async def app(make_settings: Callable[..., Settings]) -> AsyncIterator[QuartTrio]:
    application = create_app(make_settings(auth="required", egress_allow="127.0.0.1"))
    async with application.test_app():
        yield application


def conn_body(server: GitServer, **over: Any) -> dict[str, Any]:
    return {
        "provider": "gitea",
        "base_url": f"http://127.0.0.1:{server.port}",
        "repo_url": server.url("team/app.git"),
        "secret": TOKEN,
        **over,
    }


async def test_a_connection_is_checked_with_its_token_for_real(
    app: QuartTrio, git_server: GitServer, caplog: pytest.LogCaptureFixture
) -> None:
    client = app.test_client()
    world = await build_world(client, store_of(app))
    admin = world.headers("org_admin")
    made = await client.post("/v1/git/connections", json=conn_body(git_server), headers=admin)
    assert made.status_code == 201, await made.get_data()
    view = await made.get_json()
    assert view["id"].startswith("gc_") and view["org_id"] == world.org_a
    assert (view["status"], view["status_reason"]) == ("active", "")
    assert view["auth_kind"] == "https_pat" and view["report_status"] is True
    assert any(ok for _, _, ok in git_server.requests)  # it really asked the server

    wrong = await client.post(
        "/v1/git/connections", json=conn_body(git_server, secret="not-the-token"), headers=admin
    )
    assert wrong.status_code == 201
    refused = await wrong.get_json()
    assert refused["status"] == "degraded"
    assert refused["status_reason"].startswith("the repository refused the credential")

    nowhere = await client.post(
        "/v1/git/connections",
        json=conn_body(
            git_server, base_url="http://git.invalid", repo_url="http://git.invalid/a/b.git"
        ),
        headers=admin,
    )
    assert nowhere.status_code == 201
    assert (await nowhere.get_json())["status"] == "degraded"

    # members read, only owners/admins connect; another org sees none of them
    member = world.headers("member")
    assert (
        await client.post("/v1/git/connections", json=conn_body(git_server), headers=member)
    ).status_code == 403
    listed = await (await client.get("/v1/git/connections", headers=member)).get_json()
    assert {c["id"] for c in listed} >= {view["id"], refused["id"]}
    assert (
        await (
            await client.get("/v1/git/connections", headers=world.headers("wrong_org"))
        ).get_json()
        == []
    )

    # the token is nowhere: answers, audit, the database file, the logs
    everything = [str(view), str(refused), str(listed)]
    everything.append(str(await (await client.get("/v1/admin/audit", headers=ADMIN_H)).get_json()))
    assert all(TOKEN not in text for text in everything)
    assert not [r for r in caplog.records if TOKEN in r.getMessage() or TOKEN in str(r.__dict__)]
    data_dir = Path(app.extensions["runplane"].settings.data_dir)
    assert files_containing(data_dir, TOKEN.encode()) == []


def files_containing(top: Path, needle: bytes) -> list[Path]:
    """The files under ``top`` whose bytes contain ``needle`` (the database, WAL, keys)."""
    return [p for p in top.rglob("*") if p.is_file() and needle in p.read_bytes()]


@pytest.mark.parametrize(
    ("over", "status", "key"),
    [
        ({"provider": "bitbucket"}, 400, "provider"),
        ({"provider": None}, 400, "provider"),
        ({"auth_kind": "password"}, 400, "auth_kind"),
        ({"base_url": "ftp://x"}, 400, "base_url"),
        ({"repo_url": "not a url"}, 400, "repo_url"),
        ({"secret": None}, 400, "secret"),
        (
            {"provider": "github", "auth_kind": "ssh_deploy_key", "repo_url": "git@h:o/r.git"},
            422,
            "auth_kind",
        ),
        ({"auth_kind": "ssh_deploy_key", "repo_url": "https://h/o/r.git"}, 400, "repo_url"),
        (
            {"auth_kind": "ssh_deploy_key", "repo_url": "git@h:o/r.git", "secret": "x"},
            400,
            "secret",
        ),
    ],
)
async def test_bad_bodies(
    app: QuartTrio, git_server: GitServer, over: dict[str, Any], status: int, key: str
) -> None:
    client = app.test_client()
    response = await client.post(
        "/v1/git/connections", json=conn_body(git_server, **over), headers=ADMIN_H
    )
    assert response.status_code == status
    assert (await response.get_json())["errors"][0]["key"] == key


async def test_internal_hosts_are_refused_unless_allowed(
    make_settings: Callable[..., Settings], git_server: GitServer
) -> None:
    app = create_app(make_settings())  # no RUNPLANE_EGRESS_ALLOW
    async with app.test_app():
        response = await app.test_client().post(
            "/v1/git/connections", json=conn_body(git_server), headers=ADMIN_H
        )
        assert response.status_code == 400
        body = await response.get_json()
        assert body["code"] == "egress_refused" and body["errors"][0]["key"] == "base_url"
    assert git_server.requests == []  # refused before anything was sent


async def test_a_keyless_deploy_key_is_generated_and_shown_once(app: QuartTrio) -> None:
    client = app.test_client()
    made = await client.post(
        "/v1/git/connections",
        json={
            "provider": "forgejo",
            "base_url": "https://git.invalid",
            "repo_url": "git@git.invalid:team/app.git",
            "auth_kind": "ssh_deploy_key",
            "label": "app",
        },
        headers=ADMIN_H,
    )
    assert made.status_code == 201
    view = await made.get_json()
    assert view["ssh_pub"].startswith("ssh-ed25519 AAAA")
    assert view["ssh_pub"].endswith(f"runplane-{view['id']}")
    assert "deploy keys" in view["note"]
    assert view["status"] == "degraded"  # it cannot be checked before the key is added
    listed = await (await client.get("/v1/git/connections", headers=ADMIN_H)).get_json()
    assert listed[0]["ssh_pub"] == "" and listed[0]["note"] == ""
    row = await store_of(app).fetchone(
        "SELECT secret FROM git_connections WHERE id = ?", (view["id"],)
    )
    assert row is not None and "PRIVATE KEY" not in row["secret"]  # sealed


async def test_switched_off_is_503(make_settings: Callable[..., Settings]) -> None:
    app = create_app(make_settings(disable="git"))
    async with app.test_app():
        for method in ("GET", "POST"):
            response = await app.test_client().open(
                "/v1/git/connections", method=method, json={}, headers=ADMIN_H
            )
            assert response.status_code == 503
