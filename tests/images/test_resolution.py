"""Image resolution at submit against a real docker-registry on loopback (tests/oci.py):
tag -> digest, a moved tag (a new submit sees it, a rerun keeps the old digest), unknown
repositories and tags, a registry that is down, htpasswd with and without the org's
credential, mirrors, plain HTTP and the egress guard, and the run order's image."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from quart_trio import QuartTrio

from runplane.jobs import repo
from runplane.services.job_links import FleetLink
from tests.auth.support import ADMIN_H
from tests.images.conftest import Serve
from tests.oci import Registry, busybox_layout


def job_body(image: str, **over: Any) -> dict[str, Any]:
    return {"stack": "shell", "image": image, "command": ["cat", "/marker"], **over}


async def submit(app: QuartTrio, body: dict[str, Any]) -> Any:
    return await app.test_client().post("/v1/jobs", json=body, headers=ADMIN_H)


async def ok(response: Any, status: int = 202) -> Any:
    data = await response.get_json()
    assert response.status_code == status, data
    return data


async def run_order_of(app: QuartTrio, job_id: str) -> Any:
    root = app.extensions["runplane"].root
    row = await repo.get_row(root.store, job_id, None)
    assert row is not None
    link = FleetLink(root.store, root.fleet, root.git, root.sealer, root.images)
    return row, await link.run_order(row, 1)


def unused_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_a_tag_resolves_to_its_digest_and_a_rerun_keeps_it_after_the_tag_moves(
    serve: Serve, oci_registry: Registry, busybox_image: Path, tmp_path: Path
) -> None:
    first = oci_registry.push(busybox_image, "team/bb", "v1")
    async with serve(insecure_registries=oci_registry.host) as app:
        image = f"{oci_registry.host}/team/bb:v1"
        job = await ok(await submit(app, job_body(image)))
        assert job["image"] == f"{oci_registry.host}/team/bb@{first}"
        again = await ok(await submit(app, job_body(image)))
        assert again["spec_hash"] == job["spec_hash"]  # equal specs, equal hashes

        row, order = await run_order_of(app, job["job_id"])
        assert row.spec.container is not None
        assert (row.spec.container.asked, row.spec.container.source) == (image, "job")
        assert row.spec.container.platforms == ["linux/amd64"]
        assert order.spec.image.ref == job["image"]
        assert order.spec.image.source == job["image"] and order.spec.image.insecure
        assert order.spec.image.auth is None

        moved = oci_registry.push(busybox_layout(tmp_path / "v2", "moved"), "team/bb", "v1")
        assert moved != first
        rerun = await ok(
            await app.test_client().post(f"/v1/jobs/{job['job_id']}/rerun", headers=ADMIN_H)
        )
        assert rerun["image"] == job["image"] and rerun["spec_hash"] == job["spec_hash"]
        fresh = await ok(await submit(app, job_body(image)))
        assert fresh["image"] == f"{oci_registry.host}/team/bb@{moved}"
        assert fresh["spec_hash"] != job["spec_hash"]

        # a digest given is kept, once the registry says it has it
        pinned = await ok(await submit(app, job_body(f"{oci_registry.host}/team/bb@{first}")))
        assert pinned["image"] == job["image"]


async def test_unknown_images_are_a_422_naming_image(
    serve: Serve, oci_registry: Registry, busybox_image: Path
) -> None:
    oci_registry.push(busybox_image, "team/bb", "v1")
    host = oci_registry.host
    async with serve(insecure_registries=host) as app:
        for image in (
            f"{host}/team/bb:nope",
            f"{host}/team/gone:v1",
            f"{host}/team/bb@sha256:{'0' * 64}",
        ):
            problem = await ok(await submit(app, job_body(image)), 422)
            assert problem["code"] == "unknown_image", image
            assert problem["errors"][0]["key"] == "image"
            assert "UNKNOWN" in problem["detail"]
        bad = await ok(await submit(app, job_body("Not An Image")), 400)
        assert bad["errors"][0]["key"] == "image"


async def test_a_registry_that_is_down_is_a_503_with_retry_after(
    serve: Serve, oci_registry: Registry, busybox_image: Path
) -> None:
    oci_registry.push(busybox_image, "team/bb", "v1")
    nowhere = f"127.0.0.1:{unused_port()}"
    async with serve(insecure_registries=f"{oci_registry.host},{nowhere}") as app:
        response = await submit(app, job_body(f"{nowhere}/team/bb:v1"))
        problem = await ok(response, 503)
        assert problem["code"] == "registry_unavailable"
        assert response.headers["Retry-After"] == "30"
        oci_registry.stop()
        stopped = await submit(app, job_body(f"{oci_registry.host}/team/bb:v1"))
        assert (await ok(stopped, 503))["code"] == "registry_unavailable"


async def test_a_registry_on_loopback_named_in_no_setting_is_refused_by_the_egress_guard(
    serve: Serve, oci_registry: Registry, busybox_image: Path
) -> None:
    oci_registry.push(busybox_image, "team/bb", "v1")
    async with serve() as app:
        problem = await ok(await submit(app, job_body(f"{oci_registry.host}/team/bb:v1")), 422)
        assert problem["code"] == "egress_refused"
        assert problem["errors"][0]["key"] == "image"
        assert (
            "loopback" in problem["detail"] and "RUNPLANE_INSECURE_REGISTRIES" in problem["detail"]
        )


async def test_a_mirror_serves_docker_hub_names(
    serve: Serve, oci_registry: Registry, busybox_image: Path
) -> None:
    digest = oci_registry.push(busybox_image, "library/busybox", "v1")
    host = oci_registry.host
    async with serve(registry_mirrors=f"docker.io={host}", insecure_registries=host) as app:
        job = await ok(await submit(app, job_body("busybox:v1")))
        assert job["image"] == f"docker.io/library/busybox@{digest}"
        _, order = await run_order_of(app, job["job_id"])
        assert order.spec.image.ref == job["image"]
        assert order.spec.image.source == f"{host}/library/busybox@{digest}"
        assert order.spec.image.insecure


async def test_stack_images_are_resolved_only_when_asked(
    serve: Serve, oci_registry: Registry, busybox_image: Path
) -> None:
    async with serve() as app:
        job = await ok(await submit(app, {"stack": "shell", "command": ["true"]}))
        assert job["image"] == "debian:bookworm-slim"  # declared: a host job, offline
        row, order = await run_order_of(app, job["job_id"])
        assert row.spec.containers() == [] and order.spec.image is None
    digest = oci_registry.push(busybox_image, "library/debian", "bookworm-slim")
    host = oci_registry.host
    async with serve(
        registry_mirrors=f"docker.io={host}", insecure_registries=host, stack_images="resolve"
    ) as app:
        job = await ok(await submit(app, {"stack": "shell", "command": ["true"]}))
        assert job["image"] == f"docker.io/library/debian@{digest}"
        row, _ = await run_order_of(app, job["job_id"])
        assert row.spec.container is not None and row.spec.container.source == "stack"


async def test_run_specs_and_pipeline_stages_take_an_image_too(
    serve: Serve, oci_registry: Registry, busybox_image: Path
) -> None:
    digest = oci_registry.push(busybox_image, "team/bb", "v1")
    image = f"{oci_registry.host}/team/bb:v1"
    async with serve(insecure_registries=oci_registry.host) as app:
        client = app.test_client()
        body = {**job_body(image), "layers": {"org": {}}}
        run = await ok(await client.post("/v1/runs", json=body, headers=ADMIN_H))
        assert run["image"] == f"{oci_registry.host}/team/bb@{digest}"
        stage = {"name": "a", **job_body(image)}
        made = await ok(
            await client.post("/v1/pipelines", json={"stages": [stage]}, headers=ADMIN_H)
        )
        job = await ok(
            await client.get(f"/v1/jobs/{made['stages'][0]['job_id']}", headers=ADMIN_H), 200
        )
        assert job["image"] == run["image"]


async def test_only_an_insecure_registry_is_spoken_to_over_plain_http(
    serve: Serve, oci_registry: Registry, busybox_image: Path
) -> None:
    oci_registry.push(busybox_image, "library/busybox", "v1")
    # named as a mirror, the loopback registry passes the egress guard; not named insecure,
    # it is asked over HTTPS, which a plain-HTTP registry cannot answer
    async with serve(registry_mirrors=f"docker.io={oci_registry.host}") as app:
        problem = await ok(await submit(app, job_body("busybox:v1")), 503)
        assert problem["code"] == "registry_unavailable"
