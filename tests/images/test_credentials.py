"""Registry credentials (``/v1/registries``) against a registry behind htpasswd: without
one the registry's refusal is a 422 naming the image, with the org's it resolves, a wrong
one is the registry's reason; the run order hands the credential to the node; the
password is never in an answer, the audit trail, the database file or the logs; another
org's credential is a 404 and is never used for its jobs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.auth.support import ADMIN_H, World, build_world, store_of
from tests.images.conftest import Serve
from tests.images.test_resolution import job_body, ok, run_order_of
from tests.oci import Registry

PASSWORD = "s3cret-pull"


def files_containing(top: Path, needle: bytes) -> list[Path]:
    return [p for p in top.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def wrong_credential_is_refused(client: Any, world: World, host: str, image: str) -> Any:
    """A wrong password: the registry's refusal; the credential is deleted again (only by
    its org). The refusal's answer."""
    admin = world.headers("org_admin")
    wrong = {"registry": host, "username": "puller", "password": "not-it"}
    made = await ok(await client.post("/v1/registries", json=wrong, headers=admin), 201)
    denied = await ok(await client.post("/v1/jobs", json=job_body(image), headers=admin), 422)
    assert denied["code"] == "registry_denied"
    assert "refused the org's credential" in denied["detail"]
    gone = await client.delete(f"/v1/registries/{made['id']}", headers=world.headers("wrong_org"))
    assert gone.status_code == 404
    assert (await client.delete(f"/v1/registries/{made['id']}", headers=admin)).status_code == 204
    return denied


async def test_an_orgs_credential_resolves_its_images_and_goes_to_the_node(
    serve: Serve,
    oci_auth_registry: Registry,
    busybox_image: Path,
    caplog: pytest.LogCaptureFixture,
    durable_store_url: str | None,
) -> None:
    digest = oci_auth_registry.push(busybox_image, "private/bb", "v1")
    host = oci_auth_registry.host
    image = f"{host}/private/bb:v1"
    on = {"database_url": durable_store_url} if durable_store_url else {}
    async with serve(auth="required", insecure_registries=host, **on) as app:
        client = app.test_client()
        world = await build_world(client, store_of(app))
        admin, member = world.headers("org_admin"), world.headers("member")

        refused = await ok(await client.post("/v1/jobs", json=job_body(image), headers=admin), 422)
        assert refused["code"] == "registry_denied" and refused["errors"][0]["key"] == "image"
        assert "UNAUTHORIZED" in refused["detail"]

        denied = await wrong_credential_is_refused(client, world, host, image)

        right = {"registry": host, "username": "puller", "password": PASSWORD}
        cred = await ok(await client.post("/v1/registries", json=right, headers=admin), 201)
        assert cred["id"].startswith("rgc_") and cred["registry"] == host
        assert set(cred) == {"id", "org_id", "registry", "username", "created_at"}
        twice = await client.post("/v1/registries", json=right, headers=admin)
        assert twice.status_code == 409
        assert (await client.post("/v1/registries", json=right, headers=member)).status_code == 403

        job = await ok(await client.post("/v1/jobs", json=job_body(image), headers=admin))
        assert job["image"] == f"{host}/private/bb@{digest}"
        _, order = await run_order_of(app, job["job_id"])
        assert order.spec.image.auth is not None
        assert (order.spec.image.auth.username, order.spec.image.auth.password) == (
            "puller",
            PASSWORD,
        )
        assert PASSWORD not in repr(order)

        # another org has no credential for it: the registry refuses its submit
        other = await client.post(
            "/v1/jobs", json=job_body(image), headers=world.headers("wrong_org")
        )
        assert other.status_code == 422
        listed = await ok(await client.get("/v1/registries", headers=admin), 200)
        assert [c["id"] for c in listed] == [cred["id"]]
        assert (
            await ok(await client.get("/v1/registries", headers=world.headers("wrong_org")), 200)
            == []
        )

        everything = [str(refused), str(denied), str(cred), str(listed), str(job)]
        everything.append(
            str(await (await client.get("/v1/admin/audit", headers=ADMIN_H)).get_json())
        )
        assert all(PASSWORD not in text and "not-it" not in text for text in everything)
        data_dir = Path(app.extensions["runplane"].settings.data_dir)
        assert files_containing(data_dir, PASSWORD.encode()) == []
    assert not [
        r for r in caplog.records if PASSWORD in r.getMessage() or PASSWORD in str(r.__dict__)
    ]


async def test_bad_credential_bodies(serve: Serve) -> None:
    async with serve() as app:
        client = app.test_client()
        for body, key in (
            ({"registry": "https://x", "username": "u", "password": "p"}, "registry"),
            ({"registry": "ghcr.io", "username": "u"}, "password"),
            ({"registry": "ghcr.io", "username": "u", "password": ""}, "password"),
        ):
            answer = await client.post("/v1/registries?org=org_default", json=body, headers=ADMIN_H)
            assert answer.status_code == 400, body
            assert (await answer.get_json())["errors"][0]["key"] == key
        hub = {"registry": "index.docker.io", "username": "u", "password": "p"}
        made = await ok(
            await client.post("/v1/registries?org=org_default", json=hub, headers=ADMIN_H), 201
        )
        assert made["registry"] == "docker.io"


async def test_a_mirror_is_asked_with_the_mirrors_credential_never_the_registrys(
    serve: Serve, oci_auth_registry: Registry, busybox_image: Path
) -> None:
    digest = oci_auth_registry.push(busybox_image, "library/busybox", "v1")
    mirror = oci_auth_registry.host
    async with serve(registry_mirrors=f"docker.io={mirror}", insecure_registries=mirror) as app:
        client = app.test_client()
        hub = {"registry": "docker.io", "username": "puller", "password": PASSWORD}
        await ok(
            await client.post("/v1/registries?org=org_default", json=hub, headers=ADMIN_H), 201
        )
        refused = await client.post("/v1/jobs", json=job_body("busybox:v1"), headers=ADMIN_H)
        assert (await ok(refused, 422))["code"] == "registry_denied"
        own = {**hub, "registry": mirror}
        await ok(
            await client.post("/v1/registries?org=org_default", json=own, headers=ADMIN_H), 201
        )
        job = await ok(await client.post("/v1/jobs", json=job_body("busybox:v1"), headers=ADMIN_H))
        assert job["image"] == f"docker.io/library/busybox@{digest}"
        _, order = await run_order_of(app, job["job_id"])
        assert order.spec.image.source == f"{mirror}/library/busybox@{digest}"
        assert order.spec.image.auth is not None and order.spec.image.auth.password == PASSWORD
