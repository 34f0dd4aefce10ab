"""Jobs that run in their images (docs/containers.md), end to end with real parts: the
CNCF registry on loopback (tests/oci.py), the server resolving tags to digests over the
registry API, and a real agent (`runplane agent --executor container`) pulling with
skopeo, unpacking with umoci and running the job in the image's rootfs with bubblewrap,
or with gVisor's runsc."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from tests.oci import Registry, busybox_layout, debian_python_layout

from .conftest import (
    ADMIN,
    LiveServer,
    StartAgent,
    e2e_settings,
    job_logs,
    online_nodes,
    start_server,
    submit,
    wait_for,
    wait_phase,
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="the container executor runs as root here"
)
ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
ENDED = ("succeeded", "failed", "timeout", "cancelled")


@pytest.fixture
async def image_server(
    nursery: trio.Nursery, data_dir: Path, oci_registry: Registry, oci_auth_registry: Registry
) -> AsyncIterator[LiveServer]:
    """A server that reaches the two test registries over plain HTTP."""
    insecure = f"{oci_registry.host},{oci_auth_registry.host}"
    live = await start_server(
        nursery, e2e_settings(data_dir, insecure_registries=insecure), heartbeat_sec=0.5
    )
    yield live
    live.stop.set()
    await live.done.wait()


@pytest.fixture
def host_only() -> Iterator[Path]:
    """A file that exists on the node and in no image."""
    path = Path(f"/tmp/runplane-host-only-{uuid.uuid4().hex}")
    path.write_text("the host's\n")
    yield path
    path.unlink()


async def _agent(server: LiveServer, start_agent: StartAgent, work_dir: Path, *extra: str) -> None:
    start_agent(
        server.url, f"img-{uuid.uuid4().hex[:6]}", "--executor", "container",
        "--work-dir", str(work_dir), "--max-concurrency", "4", *extra,
    )  # fmt: skip
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the container agent")


async def _run(
    client: httpx.AsyncClient, body: dict[str, Any], within: float = 90
) -> dict[str, Any]:
    job_id = await submit(client, {"stack": "shell", **body})
    return await wait_phase(client, job_id, *ENDED, within=within)


async def _system(client: httpx.AsyncClient, job_id: str) -> str:
    return "\n".join(await job_logs(client, job_id, "system"))


async def test_a_job_runs_in_its_image_pinned_to_the_digest_its_tag_had(
    image_server: LiveServer,
    start_agent: StartAgent,
    work_dir: Path,
    oci_registry: Registry,
    tmp_path: Path,
    host_only: Path,
) -> None:
    first = oci_registry.push(busybox_layout(tmp_path, "marker-one"), "team/bb", "v1")
    await _agent(image_server, start_agent, work_dir)
    image = f"{oci_registry.host}/team/bb:v1"
    script = (
        f"cat /marker; test -e {host_only} && echo host-visible || echo host-hidden; "
        "mkdir -p /work/out && echo made-in-image > /work/out/result.txt"
    )
    async with image_server.client() as client:
        view = await _run(client, {
            "image": image, "command": ["sh", "-c", script],
            "outputs": [{"artifact": "result", "glob": "out/result.txt"}],
        })  # fmt: skip
        assert view["phase"] == "succeeded", (view, await _system(client, view["job_id"]))
        assert view["image"] == f"{oci_registry.host}/team/bb@{first}"
        out = await job_logs(client, view["job_id"], "stdout")
        assert out == ["marker-one", "host-hidden"]
        [artifact] = view["artifacts"]
        fetched = await client.get(f"/v1/artifacts/{view['job_id']}/out/result.txt")
        assert artifact["artifact"] == "result" and fetched.text == "made-in-image\n"
        assert "bubblewrap" in await _system(client, view["job_id"])

        # the tag moves; a rerun keeps the bytes it ran, a new submit takes the new ones
        second = oci_registry.push(busybox_layout(tmp_path, "marker-two"), "team/bb", "v1")
        rerun = await client.post(f"/v1/jobs/{view['job_id']}/rerun")
        assert rerun.status_code == 202, rerun.text
        again = await wait_phase(client, rerun.json()["job_id"], *ENDED, within=90)
        assert again["image"] == view["image"] and again["spec_hash"] == view["spec_hash"]
        assert (await job_logs(client, again["job_id"], "stdout"))[0] == "marker-one"
        fresh = await _run(client, {"image": image, "command": ["cat", "/marker"]})
        assert fresh["image"] == f"{oci_registry.host}/team/bb@{second}"
        assert await job_logs(client, fresh["job_id"], "stdout") == ["marker-two"]
        # the rerun found its digest in the node's cache: no second download
        assert "cached on this node" in await _system(client, again["job_id"])


async def test_unknown_images_and_registry_credentials(
    image_server: LiveServer,
    start_agent: StartAgent,
    work_dir: Path,
    oci_registry: Registry,
    oci_auth_registry: Registry,
    busybox_image: Path,
) -> None:
    oci_auth_registry.push(busybox_image, "private/bb", "v1")
    await _agent(image_server, start_agent, work_dir)
    async with image_server.client() as client:
        missing = await client.post("/v1/jobs", json={
            "stack": "shell", "image": f"{oci_registry.host}/team/nothing:v9",
        })  # fmt: skip
        assert missing.status_code == 422, missing.text
        assert "image" in missing.text and "team/nothing" in missing.text
        private = f"{oci_auth_registry.host}/private/bb:v1"
        anonymous = await client.post("/v1/jobs", json={"stack": "shell", "image": private})
        assert anonymous.status_code == 422, anonymous.text
        wrong = await client.post("/v1/registries?org=org_default", headers=ADMIN_H, json={
            "registry": oci_auth_registry.host, "username": "puller", "password": "not-it",
        })  # fmt: skip
        assert wrong.status_code == 201, wrong.text
        assert "not-it" not in wrong.text
        refused = await client.post("/v1/jobs", json={"stack": "shell", "image": private})
        assert refused.status_code == 422 and "unauthorized" in refused.text.lower(), refused.text
        assert "not-it" not in refused.text
        gone = await client.delete(f"/v1/registries/{wrong.json()['id']}", headers=ADMIN_H)
        assert gone.status_code == 204, gone.text
        right = await client.post("/v1/registries?org=org_default", headers=ADMIN_H, json={
            "registry": oci_auth_registry.host, "username": "puller", "password": "s3cret-pull",
        })  # fmt: skip
        assert right.status_code == 201, right.text
        view = await _run(client, {"image": private, "command": ["cat", "/marker"]})
        assert view["phase"] == "succeeded", (view, await _system(client, view["job_id"]))
        assert await job_logs(client, view["job_id"], "stdout") == ["runplane-image-marker"]
        assert "s3cret-pull" not in await _system(client, view["job_id"])

        # a registry that is gone: 503 with Retry-After, nothing queued
        oci_registry.stop()
        down = await client.post("/v1/jobs", json={
            "stack": "shell", "image": f"{oci_registry.host}/team/bb:v1",
        })  # fmt: skip
        assert down.status_code == 503 and down.headers.get("Retry-After"), down.text


async def test_the_cache_evicts_the_least_recently_used_image(
    image_server: LiveServer,
    start_agent: StartAgent,
    work_dir: Path,
    oci_registry: Registry,
    tmp_path: Path,
) -> None:
    # busybox-static is ~2 MB: a 3 MB cache holds one image at a time
    for marker in ("evict-a", "evict-b"):
        oci_registry.push(busybox_layout(tmp_path, marker), f"team/{marker}", "v1")
    await _agent(image_server, start_agent, work_dir, "--image-cache-gb", "0.003")
    async with image_server.client() as client:
        runs = []
        for marker in ("evict-a", "evict-b", "evict-a"):
            view = await _run(client, {
                "image": f"{oci_registry.host}/team/{marker}:v1", "command": ["cat", "/marker"],
            })  # fmt: skip
            assert view["phase"] == "succeeded", (view, await _system(client, view["job_id"]))
            assert await job_logs(client, view["job_id"], "stdout") == [marker]
            runs.append(await _system(client, view["job_id"]))
        # the third job's image had been evicted for the second's: pulled again
        assert "cached on this node" not in runs[2]
        assert "pulled" in runs[2]


@pytest.mark.skipif(shutil.which("runsc") is None, reason="needs gVisor's runsc")
async def test_a_gvisor_job_runs_under_gvisor(
    image_server: LiveServer,
    start_agent: StartAgent,
    work_dir: Path,
    oci_registry: Registry,
    busybox_image: Path,
) -> None:
    oci_registry.push(busybox_image, "team/bb", "v1")
    await _agent(image_server, start_agent, work_dir)
    async with image_server.client() as client:
        # placed at all: the node reported isolation-gvisor (its probe run of runsc passed)
        view = await _run(client, {
            "image": f"{oci_registry.host}/team/bb:v1", "isolation": "gvisor",
            "command": ["sh", "-c", "cat /marker; uname -r; dmesg | head -1"],
        })  # fmt: skip
        assert view["phase"] == "succeeded", (view, await _system(client, view["job_id"]))
        out = await job_logs(client, view["job_id"], "stdout")
        assert out[0] == "runplane-image-marker"
        assert out[1] == "4.4.0"  # gVisor's kernel version, not the host's
        assert "gVisor" in out[2]
        assert "gVisor" in await _system(client, view["job_id"])


async def test_a_pod_of_two_images_talks_over_localhost(
    image_server: LiveServer,
    start_agent: StartAgent,
    work_dir: Path,
    oci_registry: Registry,
    tmp_path: Path,
) -> None:
    oci_registry.push(busybox_layout(tmp_path, "pod-server"), "team/server", "v1")
    oci_registry.push(busybox_layout(tmp_path, "pod-client"), "team/client", "v1")
    await _agent(image_server, start_agent, work_dir)
    serve = 'while true; do echo "pong from $(cat /marker)" | nc -l -p 7070; done'
    ask = (
        'while true; do echo "$(cat /marker) got: $(nc 127.0.0.1 7070 </dev/null)"; sleep 0.3; done'
    )
    body = {"name": "two-images", "pod": {"services": [
        {"name": "server", "image": f"{oci_registry.host}/team/server:v1",
         "command": ["sh", "-c", serve]},
        {"name": "client", "image": f"{oci_registry.host}/team/client:v1",
         "needs": ["server"], "command": ["sh", "-c", ask]},
    ]}}  # fmt: skip
    async with image_server.client() as client:
        created = await client.post("/v1/sessions", json=body)
        assert created.status_code == 202, created.text
        job_id = created.json()["job_id"]

        async def answered() -> list[str]:
            lines = await job_logs(client, job_id, "stdout")
            return [x for x in lines if x == "pod-client got: pong from pod-server"]

        assert await wait_for(answered, 60, "the client service's answer from the server")
        await client.delete(f"/v1/sessions/{created.json()['id']}")


async def test_a_python_job_in_a_debian_image(
    image_server: LiveServer,
    start_agent: StartAgent,
    work_dir: Path,
    oci_registry: Registry,
) -> None:
    oci_registry.push(debian_python_layout(), "team/debian-python", "bookworm")
    await _agent(image_server, start_agent, work_dir)
    code = (
        "import sys, pathlib; "
        "print('python', sys.version_info[0], pathlib.Path('/etc/debian_version').read_text().split('.')[0])"
    )
    async with image_server.client() as client:
        view = await _run(
            client,
            {"image": f"{oci_registry.host}/team/debian-python:bookworm",
             "command": ["python3", "-c", code]},
            within=180,
        )  # fmt: skip
        assert view["phase"] == "succeeded", (view, await _system(client, view["job_id"]))
        assert await job_logs(client, view["job_id"], "stdout") == ["python 3 12"]


async def test_an_image_job_waits_for_a_node_that_runs_images(
    image_server: LiveServer, start_agent: StartAgent, oci_registry: Registry, busybox_image: Path
) -> None:
    """A process-executor node never runs an image job on its host filesystem."""
    oci_registry.push(busybox_image, "team/bb", "v1")
    start_agent(image_server.url, "host-only")
    async with image_server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the process agent")
        job_id = await submit(client, {
            "stack": "shell", "image": f"{oci_registry.host}/team/bb:v1", "command": ["true"],
        })  # fmt: skip

        async def reason() -> str:
            view = (await client.get(f"/v1/jobs/{job_id}")).json()
            assert view["phase"] == "queued", view
            return str(view.get("wait_reason") or "")

        why = await wait_for(reason, 30, "a wait reason")
        assert "executor-container" in why, why
        await trio.sleep(1)  # still not run
        assert (await client.get(f"/v1/jobs/{job_id}")).json()["phase"] == "queued"
