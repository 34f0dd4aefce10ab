"""Giving job uids back in batches (``uids.py``): the uids of the attempts that end while
a sweep runs are swept together in the next one.

A uid's sweep reads every process's ``/proc/<pid>/status``, walks the shared temp dirs
and reads the IPC tables (``leftovers.py``); its cost grows with the node's processes and
files, not with the job. One sweep for every uid released meanwhile costs about what one
sweep costs, so at a high turnover the agent sweeps a few times a second instead of once
per job (docs/benchmarks.md, "a node's job turnover"). Each uid is still swept whole,
in the same order, before its lock is released: nothing is given out half swept.

The first release to arrive leads: it sweeps the batch in a worker thread, hands each
release in it its result, and passes the lead to the first release that arrived
meanwhile, which sweeps the next batch. No task of its own.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from pathlib import Path

import trio

from runplane.agent.uids import Released, UidPool


class _Slot:
    __slots__ = ("done", "lead", "result")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.lead = False
        self.result: Released | BaseException | None = None


class Releases:
    """Releases into one :class:`UidPool`, swept in batches."""

    def __init__(self, pool: UidPool) -> None:
        self.pool = pool
        self._pending: list[tuple[Hashable, list[Path], _Slot]] = []
        self._running = False

    async def release(self, holder: Hashable, own_dirs: Iterable[Path] = ()) -> Released | None:
        """:meth:`UidPool.release`, swept with whatever else is released meanwhile."""
        slot = _Slot()
        self._pending.append((holder, list(own_dirs), slot))
        if not self._running:
            self._running = slot.lead = True
        else:
            await slot.done.wait()  # a result, or the lead of the next batch
        if slot.lead:
            await self._sweep()
        if isinstance(slot.result, BaseException):
            raise slot.result
        return slot.result

    async def _sweep(self) -> None:
        batch, self._pending = self._pending, []
        try:
            results: list[Released | BaseException | None] = list(
                await trio.to_thread.run_sync(
                    self.pool.release_many, [(holder, dirs) for holder, dirs, _ in batch]
                )
            )
        except BaseException as exc:  # every release of the batch is told
            results = [exc] * len(batch)
        for (_, _, slot), result in zip(batch, results, strict=True):
            slot.result = result
            if not slot.lead:
                slot.done.set()
        if self._pending:  # arrived meanwhile: the first of them leads the next batch
            after = self._pending[0][2]
            after.lead = True
            after.done.set()
        else:
            self._running = False
