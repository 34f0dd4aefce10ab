"""A real agent's job runner with an image cache, against the in-test server of
``tests/agent/test_client.py`` and a real registry: image jobs pull during ``pulling``
(progress in the job's log), pin their image while they run, and report the cache in the
hello and in heartbeats once it changed. The agent is a process-executor one given an
image store below its setup (``--executor container`` itself is the container executor's
to accept), so the command runs on the host here."""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import pytest
import trio

from runplane.agent.client import Agent
from runplane.agent.core import Core
from runplane.agent.images.jobimages import image_refusal, pin_images
from runplane.agent.images.store import ImageStore
from runplane.agent.protocol import (
    Heartbeat,
    ImageFacts,
    ImageOrder,
    JobFinished,
    JobLogs,
    JobPhase,
    PodServiceSpec,
    RunSpec,
)
from tests.agent.images.helpers import Notes, order_for
from tests.agent.test_client import FACTS, FakeServer, make_agent, run_msg
from tests.oci import Registry, busybox_layout

MB = 1_000_000


@pytest.fixture
def busybox_order(oci_registry: Registry, busybox_image: Path) -> ImageOrder:
    return order_for(oci_registry, "bb", oci_registry.push(busybox_image, "bb", "v1"))


def image_agent(tmp_path: Path, server: FakeServer) -> Agent:
    agent = make_agent(tmp_path, server)
    agent.runner.images = ImageStore(tmp_path / "agent" / "images", 100 * MB)
    return agent


def system_lines(server: FakeServer, job_id: str) -> list[str]:
    return [
        line[1]
        for m in server.of(JobLogs)
        if m.job_id == job_id
        for line in m.lines
        if line[0] == "system"
    ]


async def test_an_image_job_pulls_while_pulling_and_holds_its_image_while_it_runs(
    nursery: trio.Nursery, tmp_path: Path, busybox_order: ImageOrder
) -> None:
    server = await FakeServer.start(nursery, heartbeat_sec=0.2)
    agent = image_agent(tmp_path, server)
    await nursery.start(agent.run)
    hello = server.hellos()[0]
    assert hello.facts.images is not None and hello.facts.images.digests == []
    assert hello.facts.images.limit_bytes == 100 * MB
    digest = busybox_order.ref.rpartition("@")[2]
    store = agent.runner.images
    assert store is not None
    await server.send(run_msg(["sleep", "0.5"], image=busybox_order))
    await server.wait(JobPhase, lambda m: m.phase == "running")
    assert store.pinned(digest)
    finished = await server.wait(JobFinished)
    assert finished.outcome == "succeeded", finished.error
    lines = system_lines(server, "job_1")
    assert lines[0] == f"pulling {busybox_order.ref} from {busybox_order.source}"
    assert any(line.startswith("layer 1/1 sha256:") for line in lines)
    assert any(line.startswith(f"pulled {busybox_order.ref}: 1 layer") for line in lines)
    assert any(line.startswith("unpacked in ") for line in lines)
    beat = await server.wait(Heartbeat, lambda m: m.images is not None)
    assert beat.images is not None and beat.images.digests == [digest]
    await agent_idle(agent)
    assert not store.pinned(digest)
    # a second job of the digest starts without a pull; the cache did not change
    await server.send(run_msg(["true"], job_id="job_2", image=busybox_order))
    assert (await server.wait(JobFinished, lambda m: m.job_id == "job_2")).outcome == "succeeded"
    assert f"image {busybox_order.ref} cached on this node" in system_lines(server, "job_2")
    assert store.pulls == 1
    agent.request_stop()


async def agent_idle(agent: Agent) -> None:
    with trio.fail_after(10):
        await agent.core.wait_until(lambda: not agent.core.jobs)


async def test_a_failed_pull_fails_the_attempt_with_the_registry_s_reason(
    nursery: trio.Nursery,
    tmp_path: Path,
    oci_auth_registry: Registry,
    busybox_image: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runplane.agent.images import pull

    monkeypatch.setattr(pull, "RETRY_MIN_SEC", 0.01)
    monkeypatch.setattr(pull, "RETRY_MAX_SEC", 0.02)
    digest = oci_auth_registry.push(busybox_image, "private/bb", "v1")
    order = order_for(oci_auth_registry, "private/bb", digest, auth=("puller", "nope-nope"))
    server = await FakeServer.start(nursery)
    agent = image_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(run_msg(["true"], image=order))
    finished = await server.wait(JobFinished)
    assert finished.outcome == "failed"
    assert finished.error is not None
    assert finished.error.endswith("failed after 3 tries: unauthorized: authentication required")
    assert "nope-nope" not in repr(server.received)
    agent.request_stop()


async def test_an_agent_without_images_refuses_an_image_job(
    nursery: trio.Nursery, tmp_path: Path, busybox_order: ImageOrder
) -> None:
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server)
    await nursery.start(agent.run)
    assert server.hellos()[0].facts.images is None
    await server.send(run_msg(["true"], image=busybox_order))
    finished = await server.wait(JobFinished)
    assert finished.outcome == "failed"
    assert finished.error is not None and "cannot run images" in finished.error
    assert "executor-container" in finished.error
    assert not (tmp_path / "agent" / "images").exists()
    agent.request_stop()


async def test_a_cancel_while_pulling_ends_the_attempt_and_keeps_nothing(
    nursery: trio.Nursery, tmp_path: Path, busybox_order: ImageOrder
) -> None:
    server = await FakeServer.start(nursery)
    agent = image_agent(tmp_path, server)
    await nursery.start(agent.run)
    await server.send(run_msg(["true"], image=busybox_order, timeout_sec=0))
    # the first system line is sent as skopeo starts
    await server.wait(JobLogs)
    from runplane.agent.protocol import Cancel

    await server.send(Cancel(job_id="job_1", attempt=1))
    finished = await server.wait(JobFinished)
    assert finished.outcome in ("cancelled", "succeeded")  # the pull may have won the race
    store = agent.runner.images
    assert store is not None
    if finished.outcome == "cancelled":
        assert finished.error == "cancelled while pulling its images"
        assert store.digests() == []
    assert list((tmp_path / "agent" / "images" / "tmp").iterdir()) == []
    agent.request_stop()


async def test_pod_services_get_their_own_images_each_pulled_once(
    oci_registry: Registry, tmp_path: Path
) -> None:
    layouts = [busybox_layout(tmp_path, f"svc{i}") for i in range(2)]
    orders = [
        order_for(oci_registry, f"s{i}", oci_registry.push(layout, f"s{i}", "v1"))
        for i, layout in enumerate(layouts)
    ]
    spec = RunSpec(
        command=["true"],
        image=orders[0],
        pod=[
            PodServiceSpec(name="db", command=["true"], image=orders[1]),
            PodServiceSpec(name="app", command=["true"], image=orders[0]),
            PodServiceSpec(name="plain", command=["true"]),
        ],
    )
    store = ImageStore(tmp_path / "images", 100 * MB)
    store.open()
    async with AsyncExitStack() as pins:
        ready = await pin_images(store, spec, pins, Notes())
        assert ready.image is not None and (ready.image.path / "marker").read_text() == "svc0\n"
        assert sorted(ready.services) == ["app", "db"]
        assert (ready.services["db"].path / "marker").read_text() == "svc1\n"
        assert ready.services["app"] == ready.image
        assert store.pulls == 2
        assert all(store.pinned(o.ref.rpartition("@")[2]) for o in orders)
    assert not any(store.pinned(o.ref.rpartition("@")[2]) for o in orders)
    assert image_refusal(spec, None, "n1") is not None
    assert image_refusal(spec, store, "n1") is None
    assert image_refusal(RunSpec(command=["true"]), None, "n1") is None


def test_heartbeats_carry_the_cache_only_when_it_changed(tmp_path: Path) -> None:
    core = Core(tmp_path, "n1")
    core.facts = FACTS
    assert core.hello_facts().images is None and core.heartbeat().images is None
    now = ImageFacts(digests=["sha256:" + "a" * 64], free_bytes=500 * MB, limit_bytes=1000 * MB)
    core.image_facts = lambda: now
    assert core.hello_facts().images == now
    assert core.heartbeat().images is None  # the hello said it
    now = now.model_copy(update={"free_bytes": 495 * MB})  # the disk moved a little
    assert core.heartbeat().images is None
    now = now.model_copy(update={"free_bytes": 480 * MB})  # more than 1% of the limit
    assert core.heartbeat().images == now
    now = now.model_copy(update={"digests": ["sha256:" + "b" * 64, *now.digests]})
    assert core.heartbeat().images == now
    assert core.heartbeat().images is None
