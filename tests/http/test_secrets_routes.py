"""``/v1/secrets`` over the app: values in, never out; sealed at rest; job env references
checked at submit (unknown and another org's alike: 422). Masking on a real agent:
tests/e2e/test_secrets_e2e.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from quart_trio import QuartTrio

from runplane.http.app import create_app
from runplane.settings import Settings
from tests.auth.support import ADMIN_H, build_world, store_of

VALUE = "hunter2-very-secret-value"


@pytest.fixture
async def app(make_settings: Callable[..., Settings]) -> AsyncIterator[QuartTrio]:
    application = create_app(make_settings(auth="required"))
    async with application.test_app():
        yield application


def files_containing(top: Path, needle: bytes) -> list[Path]:
    return [p for p in top.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def test_values_go_in_and_never_come_out(app: QuartTrio) -> None:
    client = app.test_client()
    world = await build_world(client, store_of(app))
    admin = world.headers("org_admin")
    made = await client.put("/v1/secrets/HF_TOKEN", json={"value": VALUE}, headers=admin)
    assert made.status_code == 201
    view = await made.get_json()
    assert view["name"] == "HF_TOKEN" and view["org_id"] == world.org_a
    again = await client.put("/v1/secrets/HF_TOKEN", json={"value": VALUE + "2"}, headers=admin)
    assert again.status_code == 200
    assert (await again.get_json())["created_at"] == view["created_at"]
    listed = await (await client.get("/v1/secrets", headers=admin)).get_json()
    assert [s["name"] for s in listed] == ["HF_TOKEN"] and VALUE not in str(listed)
    # another org sees nothing and cannot delete it
    assert (
        await (await client.get("/v1/secrets", headers=world.headers("wrong_org"))).get_json() == []
    )
    stranger = await client.delete("/v1/secrets/HF_TOKEN", headers=world.headers("wrong_org"))
    assert stranger.status_code == 404
    # members may not manage secrets; bad names and bodies are 400
    member = world.headers("member")
    assert (
        await client.put("/v1/secrets/X", json={"value": "v"}, headers=member)
    ).status_code == 403
    assert (
        await client.put("/v1/secrets/9bad", json={"value": "v"}, headers=admin)
    ).status_code == 400
    assert (
        await client.put("/v1/secrets/OK", json={"value": ""}, headers=admin)
    ).status_code == 400
    assert (
        await client.put("/v1/secrets/OK", json={"value": "v"}, headers=ADMIN_H)
    ).status_code == 400
    # sealed at rest, not in the audit trail
    audit = await (await client.get("/v1/admin/audit", headers=ADMIN_H)).get_json()
    assert VALUE not in str(audit)
    data_dir = Path(app.extensions["runplane"].settings.data_dir)
    assert files_containing(data_dir, VALUE.encode()) == []
    gone = await client.delete("/v1/secrets/HF_TOKEN", headers=admin)
    assert gone.status_code == 204
    assert (await client.delete("/v1/secrets/HF_TOKEN", headers=admin)).status_code == 404


async def test_a_job_may_reference_only_its_own_orgs_secrets(app: QuartTrio) -> None:
    client = app.test_client()
    world = await build_world(client, store_of(app))
    await client.put("/v1/secrets/TOKEN", json={"value": VALUE}, headers=world.headers("org_admin"))
    body = {"stack": "shell", "command": ["true"], "env": {"T": "Bearer ${secrets.TOKEN}"}}
    ok = await client.post("/v1/jobs", json=body, headers=world.headers("member"))
    assert ok.status_code == 202
    job = await ok.get_json()
    assert job["spec"]["env"].get("T") in ("Bearer ${secrets.TOKEN}", "***")  # never the value
    assert VALUE not in str(job)
    for headers, what in (
        (world.headers("wrong_org"), "another org"),
        (world.headers("member"), "unknown"),
    ):
        bad_body = body if what == "another org" else {**body, "env": {"T": "${secrets.NOPE}"}}
        refused = await client.post("/v1/jobs", json=bad_body, headers=headers)
        assert refused.status_code == 422, what
        problem = await refused.get_json()
        assert problem["code"] == "unknown_secret" and problem["errors"][0]["key"] == "env.T"
