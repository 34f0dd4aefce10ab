"""A streams directory's inotify watch is closed off the event loop (closing one waits for
the kernel's grace period): :meth:`DirWatch.close` returns at once, the descriptor is gone
soon after, and one closed while trio was waiting on it is forgotten by trio first."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import trio

from runplane.agent.stream_files import DirWatch
from tests.e2e.conftest import wait_for


def _open(fd: int) -> bool:
    return os.path.exists(f"/proc/self/fd/{fd}")


def _watch(directory: Path) -> DirWatch:
    watch = DirWatch.open(directory)
    if watch is None:
        pytest.skip("no inotify here")
    return watch


async def test_a_closed_watch_lets_go_of_its_descriptor(tmp_path: Path) -> None:
    fds = []
    for _ in range(20):
        watch = _watch(tmp_path)
        fds.append(watch.fileno())
        watch.close()

    async def all_closed() -> bool:
        return not any(_open(fd) for fd in fds)

    await wait_for(all_closed, 30, "the watches' descriptors to be closed")


async def test_a_watch_closed_while_waited_on_wakes_its_waiter(tmp_path: Path) -> None:
    watch = _watch(tmp_path)
    fd = watch.fileno()
    woke: list[type[BaseException]] = []

    async def wait_on_it() -> None:
        try:
            await trio.lowlevel.wait_readable(fd)
        except trio.ClosedResourceError as exc:
            woke.append(type(exc))

    with trio.fail_after(30):  # a waiter trio was not told of would wait forever
        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_on_it)
            await trio.testing.wait_all_tasks_blocked()
            watch.close()
    assert woke == [trio.ClosedResourceError]

    async def closed() -> bool:
        return not _open(fd)

    await wait_for(closed, 30, "the watch's descriptor to be closed")
