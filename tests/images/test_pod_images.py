"""A session's pod services run in their own images: each service's ``image`` is resolved
at submit (the session's view shows the digest; the pod job's spec carries it and its run
order gives each service its ImageOrder); an unknown one is a 422 naming the service."""

from __future__ import annotations

from pathlib import Path

from tests.auth.support import ADMIN_H
from tests.images.conftest import Serve
from tests.images.test_resolution import ok, run_order_of
from tests.oci import Registry, busybox_layout


async def test_each_pod_service_runs_in_its_resolved_image(
    serve: Serve, oci_registry: Registry, busybox_image: Path, tmp_path: Path
) -> None:
    host = oci_registry.host
    web = oci_registry.push(busybox_image, "pod/web", "v1")
    db = oci_registry.push(busybox_layout(tmp_path / "db", "db-marker"), "pod/db", "v1")
    pod = {
        "services": [
            {"name": "db", "image": f"{host}/pod/db:v1", "command": ["sleep", "60"]},
            {"name": "web", "image": f"{host}/pod/web:v1", "command": ["sleep", "60"],
             "needs": ["db"]},
            {"name": "host", "command": ["sleep", "60"]},
        ]
    }  # fmt: skip
    async with serve(insecure_registries=host) as app:
        client = app.test_client()
        session = await ok(
            await client.post("/v1/sessions", json={"pod": pod}, headers=ADMIN_H), 202
        )
        images = {s["name"]: s["image"] for s in session["services"]}
        assert images["db"] == f"{host}/pod/db@{db}"
        assert images["web"] == f"{host}/pod/web@{web}"
        row, order = await run_order_of(app, session["job_id"])
        assert row.spec.container is None  # the pod's job: its services carry their images
        assert [c.ref for c in row.spec.containers()] == [images["db"], images["web"]]
        by_name = {s.name: s for s in order.spec.pod}
        assert by_name["db"].image.ref == images["db"] and by_name["db"].image.insecure
        assert by_name["web"].image.source == images["web"]
        assert by_name["host"].image is None

        pod["services"][1]["image"] = f"{host}/pod/web:nope"
        problem = await ok(
            await client.post("/v1/sessions", json={"pod": pod}, headers=ADMIN_H), 422
        )
        assert problem["code"] == "unknown_image"
        assert problem["errors"][0]["key"] == "pod.services[1].image"


async def test_a_services_stack_image_is_resolved_only_when_asked(
    serve: Serve, oci_registry: Registry, busybox_image: Path
) -> None:
    host = oci_registry.host
    digest = oci_registry.push(busybox_image, "library/debian", "bookworm-slim")
    pod = {"services": [{"name": "sim", "stack": "shell", "command": ["sleep", "60"]}]}
    mirrored = {"registry_mirrors": f"docker.io={host}", "insecure_registries": host}
    async with serve(**mirrored) as app:
        client = app.test_client()
        session = await ok(
            await client.post("/v1/sessions", json={"pod": pod}, headers=ADMIN_H), 202
        )
        assert session["services"][0]["image"] == "debian:bookworm-slim"
        row, _ = await run_order_of(app, session["job_id"])
        assert row.spec.containers() == []
    async with serve(stack_images="resolve", **mirrored) as app:
        client = app.test_client()
        session = await ok(
            await client.post("/v1/sessions", json={"pod": pod}, headers=ADMIN_H), 202
        )
        assert session["services"][0]["image"] == f"docker.io/library/debian@{digest}"
        row, order = await run_order_of(app, session["job_id"])
        assert [c.source for c in row.spec.containers()] == ["stack"]
        assert order.spec.pod[0].image.source == f"{host}/library/debian@{digest}"
