"""The token flow (Docker Hub's, GHCR's) against a real docker-registry with ``auth:
token`` and a token service on loopback (tests/images/token_registry.py): without the
org's credential the registry refuses the anonymous token (422, its reason); with it the
token service gets the credential as Basic auth and the image resolves."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.auth.support import ADMIN_H
from tests.images.conftest import Serve
from tests.images.test_resolution import job_body, ok
from tests.images.token_registry import SERVICE, TokenService, serve_with_token_auth
from tests.oci import Registry


async def test_the_token_flow_with_and_without_the_orgs_credential(
    serve: Serve, oci_registry: Registry, busybox_image: Path, nursery: trio.Nursery
) -> None:
    digest = oci_registry.push(busybox_image, "team/tok", "v1")
    tokens = await TokenService("robot", "t0ken-pass").start(nursery)
    serve_with_token_auth(oci_registry, tokens)
    host = oci_registry.host
    image = f"{host}/team/tok:v1"
    async with serve(insecure_registries=host) as app:
        client = app.test_client()
        refused = await ok(
            await client.post("/v1/jobs", json=job_body(image), headers=ADMIN_H), 422
        )
        assert refused["code"] == "registry_denied" and refused["errors"][0]["key"] == "image"
        assert "UNAUTHORIZED" in refused["detail"]
        assert tokens.asked[-1]["scope"] == "repository:team/tok:pull"
        assert tokens.asked[-1]["service"] == SERVICE and tokens.asked[-1]["authorization"] == ""

        cred = {"registry": host, "username": "robot", "password": "wrong"}
        made = await ok(
            await client.post("/v1/registries?org=org_default", json=cred, headers=ADMIN_H), 201
        )
        wrong = await ok(await client.post("/v1/jobs", json=job_body(image), headers=ADMIN_H), 422)
        assert "the token service refused" in wrong["detail"] and "bad username" in wrong["detail"]
        await client.delete(f"/v1/registries/{made['id']}", headers=ADMIN_H)

        cred["password"] = "t0ken-pass"
        await ok(
            await client.post("/v1/registries?org=org_default", json=cred, headers=ADMIN_H), 201
        )
        job = await ok(await client.post("/v1/jobs", json=job_body(image), headers=ADMIN_H))
        assert job["image"] == f"{host}/team/tok@{digest}"
        assert tokens.asked[-1]["authorization"].startswith("Basic ")
