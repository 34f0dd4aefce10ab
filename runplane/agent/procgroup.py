"""A job's process groups: signalled, watched for live members (zombies do not count),
and the bound on reading a pipe once the group is gone (``docs/executor.md``, Timeout,
cancel and signals)."""

from __future__ import annotations

import math
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Literal

import trio

# Once the job's process group is gone, a pipe still held open by a process that left the
# group (setsid) is read until it has been quiet this long, and never longer than the cap.
DRAIN_IDLE_SEC = 1.0
DRAIN_CAP_SEC = 10.0
#: How often :func:`terminate` looks whether the group is gone within the grace period.
POLL_SEC = 0.05
#: the first look after a SIGTERM (doubled after each look, up to POLL_SEC)
FIRST_POLL_SEC = 0.002


def signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def live_members(pgid: int) -> list[int] | None:
    """Non-zombie pids of process group ``pgid`` from /proc; ``None`` without /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    members: list[int] = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(name))
    return members


async def group_alive(pgid: int) -> bool:
    """Whether any live process is left in the group (zombies waiting for a reaper don't count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    members = await trio.to_thread.run_sync(live_members, pgid)
    return True if members is None else bool(members)


@dataclass(slots=True)
class ProcResult:
    start_error: str | None = None
    returncode: int | None = None
    stopped: Literal["timeout", "cancelled"] | None = None
    sigkilled: bool = False  # our stop needed SIGKILL after the grace period


class PipeDrain:
    """Bounds reading a pipe once every process of the job's group is gone."""

    def __init__(self) -> None:
        self._cap = math.inf
        self._scopes: set[trio.CancelScope] = set()

    def start(self) -> None:
        now = trio.current_time()
        self._cap = now + DRAIN_CAP_SEC
        for scope in self._scopes:
            scope.deadline = min(now + DRAIN_IDLE_SEC, self._cap)

    def _deadline(self) -> float:
        if self._cap == math.inf:
            return math.inf
        return min(trio.current_time() + DRAIN_IDLE_SEC, self._cap)

    @contextmanager
    def read_scope(self) -> Iterator[trio.CancelScope]:
        scope = trio.CancelScope(deadline=self._deadline())
        self._scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.discard(scope)


async def terminate(proc: trio.Process, pgid: int, grace: float) -> bool:
    """SIGTERM the group, SIGKILL what is left after ``grace`` seconds; True if needed."""
    signal_group(pgid, signal.SIGTERM)
    end = trio.current_time() + grace
    pause = FIRST_POLL_SEC  # most jobs end at once on SIGTERM: look soon, then less often
    while trio.current_time() < end:
        if proc.returncode is not None and not await group_alive(pgid):
            return False
        await trio.sleep(min(pause, max(0.0, end - trio.current_time())))
        pause = min(POLL_SEC, pause * 2)
    if proc.returncode is not None and not await group_alive(pgid):
        return False
    signal_group(pgid, signal.SIGKILL)
    return True


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
