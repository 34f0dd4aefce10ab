"""The server's side of a container node's image cache (#38 item 6): the hello's
``facts.images`` and each heartbeat's ``images`` (sent when the cache changed) are stored
in the node's row, shown in its view, handed to placement (which rebuilds them from the
store after a crash) and decide where an image job goes; an image job never lands on a
node that runs no images, and its wait reason says why. The actor tree runs in process on
a real store; agents are played by the test."""

from __future__ import annotations

from pathlib import Path

import pytest

from runplane.actors import placement as pl
from runplane.actors.node import NODES, Beat
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.jobs.jobspec import ContainerImage
from runplane.jobs.spec import SubmitJobBody
from runplane.nodes import repo as nodes_repo
from runplane.persistence import Store
from runplane.system import Root

from .harness import (
    WHO,
    Agent,
    all_in,
    equals,
    eventually,
    greater,
    queue_of,
    restarts,
    running_root,
    store,
)

__all__ = ["store"]  # the fixture

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

DIGEST = "sha256:" + "0123456789abcdef" * 4
OTHER = "sha256:" + "e" * 64
IMAGE = ContainerImage(
    asked="busybox:1.36",
    ref="docker.io/library/busybox@" + DIGEST,
    platforms=["linux/amd64", "linux/arm64/v8"],
)
GATE = "test-gate"  # a capability no node has: keeps a job queued until its image is set
NO_IMAGE_NODE = (
    "no node meets: capabilities executor-container (the job runs in an image and no node "
    "runs images: start an agent with --executor container) (1 node lacks them)"
)


class ContainerNode(Agent):
    capabilities: tuple[str, ...] = ("limits-best-effort", "executor-container")


def cache(*digests: str, free: int = 1 << 30) -> p.ImageFacts:
    return p.ImageFacts(digests=list(digests), free_bytes=free, limit_bytes=4 << 30)


async def beat_images(root: Root, node_id: str, images: p.ImageFacts) -> None:
    """What the agents' WebSocket handler does with a heartbeat carrying ``images``."""
    await root.registry.tell(NODES, node_id, Beat((), images))


async def placed_images(root: Root, node_id: str) -> frozenset[str] | None:
    for shape, _ in await root.placement.ask(pl.FleetNow()):
        if shape.id == node_id:
            return shape.images
    return None


async def image_job(root: Root) -> str:
    """A queued job that runs in ``IMAGE``: submitted gated (the submit path here does
    not resolve images), its stored spec given the image, then queued again as it is
    stored (what a submit that resolved the image enqueues)."""
    body = SubmitJobBody.model_validate(
        {"stack": "shell", "command": ["true"], "requires": {"capabilities": [GATE]}}
    )
    job_id = (await root.jobs.submit(body, WHO)).row.id
    await eventually(lambda: _queued(root, job_id), "the gated job queued")
    row = await repo.get_row(root.store, job_id, None)
    assert row is not None
    spec = row.spec.model_copy(update={"container": IMAGE})
    spec = spec.model_copy(
        update={"requires": spec.requires.model_copy(update={"capabilities": []})}
    )
    await root.store.execute("UPDATE jobs SET spec = ? WHERE id = ?", (spec.stored_json(), job_id))
    await root.placement.tell(pl.Enqueue(job_id, row.priority, spec, row.org_id))
    return job_id


async def _queued(root: Root, job_id: str) -> bool:
    return job_id in await queue_of(root)


async def reason_is(root: Root, job_id: str, expected: str) -> bool:
    reasons = await root.placement.ask(pl.WaitReasons((job_id,)))
    return reasons.get(job_id) == expected


async def test_an_image_job_waits_for_a_node_that_runs_images(store: Store, tmp_path: Path) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        plain = Agent(root, agents, "node_0", cpu=8)
        await plain.connect()
        job_id = await image_job(root)
        await eventually(lambda: reason_is(root, job_id, NO_IMAGE_NODE), "the reason")
        assert job_id not in plain.runs
        runs_images = ContainerNode(root, agents, "node_c", cpu=8)
        await runs_images.connect()
        await eventually(lambda: all_in(runs_images.runs, [job_id]), "placed on node_c")
        assert job_id not in plain.runs


async def test_heartbeat_images_are_stored_shown_placed_and_rebuilt(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        a = ContainerNode(root, agents, "node_a", cpu=8)
        b = ContainerNode(root, agents, "node_b", cpu=8)
        b.images = cache(OTHER)  # what its hello reports
        await a.connect()
        await b.connect()
        await eventually(lambda: equals(placed_images(root, "node_b"), {OTHER}), "hello's")
        assert await placed_images(root, "node_a") == frozenset()

        # a heartbeat with a new cache: stored, shown, placed
        await beat_images(root, "node_b", cache(DIGEST, OTHER, free=5))
        await eventually(lambda: equals(placed_images(root, "node_b"), {DIGEST, OTHER}), "beat")
        row = await nodes_repo.get(store, "node_b")
        assert row is not None and row.facts.images is not None
        assert row.facts.images.digests == (DIGEST, OTHER)  # most recently used first
        assert (row.facts.images.free_bytes, row.facts.images.limit_bytes) == (5, 4 << 30)
        assert row.facts.cpu_cores == 8  # the rest of the facts as the hello wrote them
        views = {v["id"]: v for v in await root.fleet.views()}
        assert views["node_b"]["images"] == {
            "digests": [DIGEST, OTHER],
            "free_bytes": 5,
            "limit_bytes": 4 << 30,
        }
        assert views["node_a"]["images"] is None  # its hello reported no cache

        # the image job goes to the node that has its image (node_a would win the tie)
        first = await image_job(root)
        await eventually(lambda: all_in(b.runs, [first]), "placed on node_b")
        assert first not in a.runs
        await b.finish(first)

        # placement crashes: it rebuilds the fleet from the rows, caches included
        before = await restarts(root)
        await root.placement.tell(pl.Enqueue("job_poison", 0, None))  # type: ignore[arg-type]
        await eventually(lambda: greater(restarts(root), before), "placement restarted")
        assert await placed_images(root, "node_b") == frozenset({DIGEST, OTHER})

        # the caches change (node_b evicted it, node_a pulled it): the preference moves
        await beat_images(root, "node_b", cache(OTHER))
        await beat_images(root, "node_a", cache(DIGEST))
        await eventually(lambda: equals(placed_images(root, "node_a"), {DIGEST}), "a's beat")
        await eventually(lambda: equals(placed_images(root, "node_b"), {OTHER}), "b's beat")
        second = await image_job(root)
        await eventually(lambda: all_in(a.runs, [second]), "placed on node_a")
        assert second not in b.runs
