"""Routes /v1/nodes/join-tokens: admin gate, mint shape, list, revoke, coercion, 400/404/503."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from typing import Any

import pytest

from runplane.http.app import create_app
from runplane.http.context import services
from runplane.nodes import enrollment
from runplane.settings import Settings

from .conftest import ADMIN

AUTH = {"Authorization": f"Bearer {ADMIN}"}
PATH = "/v1/nodes/join-tokens"
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


async def mint(client: Any, body: Any = None, **kwargs: Any) -> Any:
    if body is not None:
        kwargs["json"] = body
    return await client.post(PATH, headers=AUTH, **kwargs)


@pytest.mark.parametrize(
    ("method", "path"),
    [("POST", PATH), ("GET", PATH), ("DELETE", f"{PATH}/jt_whatever")],
)
@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer not-the-admin-token-at-all"}])
async def test_admin_token_required(
    client: Any, method: str, path: str, headers: dict[str, str]
) -> None:
    response = await client.open(path, method=method, headers=headers, json={})
    assert response.status_code == 401
    body = await response.get_json()
    assert body["code"] == "unauthorized"
    assert response.headers["WWW-Authenticate"] == "Bearer"


async def test_mint_shape(client: Any) -> None:
    response = await mint(client, {"tier": "partner", "org_id": "org_acme", "label": "gpu rack"})
    assert response.status_code == 201
    assert response.headers["Cache-Control"] == "no-store"
    body = await response.get_json()
    assert set(body) == {"id", "token", "tier", "note"}
    assert re.match(r"^jt_[0-9a-z]{26}$", body["id"])
    assert re.match(r"^rpj_[A-Za-z0-9_-]{43}$", body["token"])
    assert body["tier"] == "partner"
    assert "only once" in body["note"]


@pytest.mark.parametrize("kwargs", [{}, {"data": b""}, {"data": b"  \n"}, {"json": {}}])
async def test_mint_without_a_body_uses_defaults(client: Any, kwargs: dict[str, Any]) -> None:
    response = await client.post(PATH, headers=AUTH, **kwargs)
    assert response.status_code == 201, await response.get_data()
    body = await response.get_json()
    assert body["tier"] == "community"
    [listed] = await (await client.get(PATH, headers=AUTH)).get_json()
    assert (listed["org_id"], listed["label"]) == ("org_default", "")


@pytest.mark.parametrize("tier", ["gold", "", 7, None, ["trusted"], {"x": 1}])
async def test_invalid_tier_defaults_to_community(client: Any, tier: Any) -> None:
    response = await mint(client, {"tier": tier})
    assert response.status_code == 201
    body = await response.get_json()
    assert body["tier"] == "community"
    if tier is not None:
        assert "minted as community" in body["note"]


async def test_tier_case_is_ignored(client: Any) -> None:
    body = await (await mint(client, {"tier": "Trusted"})).get_json()
    assert body["tier"] == "trusted"
    assert "minted as" not in body["note"]


@pytest.mark.parametrize(
    ("payload", "key", "code"),
    [
        ({"tier": "trusted", "lable": "typo"}, "lable", "unknown_field"),
        ({"org_id": "acme"}, "org_id", "invalid"),
        ({"org_id": 5}, "org_id", "bad_type"),
        ({"label": "x" * 201}, "label", "invalid"),
    ],
)
async def test_bad_fields_are_400(
    client: Any, payload: dict[str, Any], key: str, code: str
) -> None:
    response = await mint(client, payload)
    assert response.status_code == 400
    body = await response.get_json()
    assert body["errors"][0]["key"] == key
    assert body["errors"][0]["code"] == code
    assert key in body["detail"]
    assert await (await client.get(PATH, headers=AUTH)).get_json() == []


@pytest.mark.parametrize(
    ("data", "code"), [(b"[1]", "malformed_json"), (b"{oops", "malformed_json")]
)
async def test_malformed_bodies_are_400(client: Any, data: bytes, code: str) -> None:
    response = await client.post(
        PATH, headers={**AUTH, "Content-Type": "application/json"}, data=data
    )
    assert response.status_code == 400
    assert (await response.get_json())["code"] == code


async def test_list_is_secret_free_newest_first(client: Any) -> None:
    minted = [await (await mint(client, {"label": f"t{i}"})).get_json() for i in range(3)]
    await mint(client, {"org_id": "org_other", "label": "other"})
    response = await client.get(PATH, headers=AUTH)
    assert response.status_code == 200
    listed = await response.get_json()
    assert [t["label"] for t in listed] == ["other", "t2", "t1", "t0"]
    raw = (await response.get_data()).decode()
    for m in minted:
        assert m["token"] not in raw
        assert m["token"][len("rpj_") :] not in raw
    first = listed[-1]
    assert set(first) == {"id", "tier", "org_id", "label", "created_at", "revoked"}
    assert first["id"] == minted[0]["id"]
    assert ISO_MS.match(first["created_at"])
    assert first["revoked"] is False
    only = await (await client.get(f"{PATH}?org_id=org_other", headers=AUTH)).get_json()
    assert [t["label"] for t in only] == ["other"]
    bad = await client.get(f"{PATH}?org_id=nope", headers=AUTH)
    assert bad.status_code == 400
    assert (await bad.get_json())["errors"][0]["key"] == "org_id"


async def test_delete_revokes_then_unknown_is_404(app: Any, client: Any) -> None:
    minted = await (await mint(client, {"tier": "trusted"})).get_json()
    response = await client.delete(f"{PATH}/{minted['id']}", headers=AUTH)
    assert response.status_code == 200
    assert await response.get_json() == {"revoked": minted["id"]}
    [listed] = await (await client.get(PATH, headers=AUTH)).get_json()
    assert listed["revoked"] is True

    # revoking again is idempotent (the token is still listed, revoked)
    again = await client.delete(f"{PATH}/{minted['id']}", headers=AUTH)
    assert again.status_code == 200

    unknown = await client.delete(f"{PATH}/jt_doesnotexist", headers=AUTH)
    assert unknown.status_code == 404
    assert unknown.headers["Content-Type"] == "application/problem+json"
    assert (await unknown.get_json())["code"] == "not_found"

    # the revoked token enrolls no node
    async with app.app_context():
        store = services().store
    with pytest.raises(enrollment.EnrollmentRefused):
        await enrollment.enroll_node(store, minted["token"])


async def test_minted_token_enrolls_a_node(app: Any, client: Any) -> None:
    minted = await (await mint(client, {"tier": "partner", "org_id": "org_acme"})).get_json()
    async with app.app_context():
        store = services().store
    node = await enrollment.enroll_node(store, minted["token"])
    assert (node.tier, node.org_id) == ("partner", "org_acme")
    identity = await enrollment.verify_node_credential(store, node.credential_secret)
    assert identity is not None and identity.node_id == node.node_id


async def test_disabled_enrollment_is_503(make_settings: Callable[..., Settings]) -> None:
    application = create_app(make_settings(disable="enrollment"))
    async with application.test_app():
        client = application.test_client()
        response = await client.post(PATH, headers=AUTH, json={"tier": "trusted"})
        assert response.status_code == 503
        body = await response.get_json()
        assert body["code"] == "feature_disabled"
        assert "RUNPLANE_DISABLE" in body["detail"]
        # listing and revoking stay available: an operator can still clean up
        assert (await client.get(PATH, headers=AUTH)).status_code == 200
        assert (await client.delete(f"{PATH}/jt_x", headers=AUTH)).status_code == 404
        # and nothing was minted
        assert await (await client.get(PATH, headers=AUTH)).get_json() == []


async def test_disabled_still_needs_the_admin_token(make_settings: Callable[..., Settings]) -> None:
    application = create_app(make_settings(disable="enrollment"))
    async with application.test_app():
        response = await application.test_client().post(PATH)
        assert response.status_code == 401


async def test_secret_not_in_request_log(client: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    minted = await (await mint(client)).get_json()
    assert any(r.getMessage() == "join token minted" for r in caplog.records)
    for record in caplog.records:
        assert minted["token"] not in json.dumps(vars(record), default=str)
