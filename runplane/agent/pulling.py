"""The ``pulling`` phase of an attempt (``runner.py``, prepare): its images made ready and
pinned (``images/``, a container node), then its mounts put in place (``workspace.py``),
all of it bounded by the job's ``timeout_sec`` and ended by a cancel."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import replace

import trio

from runplane.agent.core import Job
from runplane.agent.executor import Finished
from runplane.agent.images.errors import ImageError
from runplane.agent.images.jobimages import JobImages, image_orders, pin_images
from runplane.agent.images.store import ImageStore
from runplane.agent.isolation import HostPaths
from runplane.agent.protocol import RunSpec
from runplane.agent.workspace import MountError, mounts_of, prepare_mounts

Note = Callable[[str], Awaitable[None]]


async def pull_and_mount(
    job: Job,
    spec: RunSpec,
    *,
    images: ImageStore | None,
    pins: AsyncExitStack,
    note: Note,
    host_paths: HostPaths,
    server: str,
) -> Finished | JobImages:
    """The job's images (pinned in ``pins`` until the job ends) and mounts; a Finished
    when that failed, was cancelled or timed out (``timeout_sec`` bounds it, as it bounds
    the command), its reason also noted in the job's log."""
    mounts = mounts_of(spec.workspace, list(spec.inputs))
    if not mounts and not image_orders(spec):
        return JobImages()
    started = trio.current_time()
    scratch = job.workdir.with_name(f"{job.workdir.name}.pull")
    outcome: Finished | None = None
    ready = JobImages()
    doing = "pulling its images" if image_orders(spec) else "preparing mounts"
    async with trio.open_nursery() as nursery:

        async def watch_cancel() -> None:
            nonlocal outcome
            await job.cancel.wait()
            outcome = Finished("cancelled", None, f"cancelled while {doing}", {}, 0)
            nursery.cancel_scope.cancel()

        nursery.start_soon(watch_cancel)
        timeout = spec.timeout_sec if spec.timeout_sec and spec.timeout_sec > 0 else math.inf
        with trio.move_on_after(timeout) as deadline:
            try:
                ready = await pin_images(images, spec, pins, note)
                if mounts:
                    doing = "preparing mounts"
                    await prepare_mounts(
                        job.workdir,
                        mounts,
                        scratch=scratch,
                        note=note,
                        host_paths=host_paths,
                        server=server,
                    )
            except (MountError, ImageError) as exc:
                outcome = Finished("failed", None, str(exc), {}, 0)
        if deadline.cancelled_caught:
            error = f"timed out after {timeout:g} s while {doing}"
            outcome = Finished("timeout", None, error, {}, 0)
        nursery.cancel_scope.cancel()
    if outcome is None:
        return ready
    outcome = replace(outcome, duration_sec=trio.current_time() - started)
    await note(f"{outcome.error}")
    return outcome
