"""A run order's images (``RunSpec.image``, its pod services' ``image``) as the job runner
takes them: refused on a node that runs no images, else each distinct digest taken from
the cache (pulled when it is not there) and pinned until the job ends."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field

from runplane.agent.execspec import Rootfs
from runplane.agent.images.pull import order_digest
from runplane.agent.images.store import ImageStore
from runplane.agent.protocol import ImageOrder, RunSpec

#: the capability of a node that runs images (placement sends image jobs only there)
EXECUTOR_CONTAINER = "executor-container"


@dataclass(frozen=True, slots=True)
class JobImages:
    """What a job runs in: its own image, and its pod services' by service name."""

    image: Rootfs | None = None
    services: dict[str, Rootfs] = field(default_factory=dict)


def image_orders(spec: RunSpec) -> list[ImageOrder]:
    """The images a run order names: the job's, then its pod services'."""
    orders = [spec.image] if spec.image is not None else []
    orders += [s.image for s in spec.pod or () if s.image is not None]
    return orders


def image_refusal(spec: RunSpec, store: ImageStore | None, node: str) -> str | None:
    """Why this node cannot run the order's images (None: it can, or there are none). An
    image job never runs on the host: placement should not have sent it here."""
    if store is not None or not image_orders(spec):
        return None
    return (
        f"node {node} cannot run images: its agent was not started with --executor "
        f"container; a job with an image needs a node with the capability {EXECUTOR_CONTAINER}"
    )


async def pin_images(
    store: ImageStore | None,
    spec: RunSpec,
    pins: AsyncExitStack,
    note: Callable[[str], Awaitable[None]],
) -> JobImages:
    """Each distinct image of the order ready in the cache, held by ``pins`` (released
    when the job ends); ImageError when one cannot be."""
    orders = image_orders(spec)
    if store is None or not orders:
        return JobImages()
    ready: dict[str, Rootfs] = {}
    for order in orders:
        digest = order_digest(order)
        if digest not in ready:
            ready[digest] = await pins.enter_async_context(store.use(order, note))
    return JobImages(
        image=ready[order_digest(spec.image)] if spec.image is not None else None,
        services={
            s.name: ready[order_digest(s.image)] for s in spec.pod or () if s.image is not None
        },
    )
