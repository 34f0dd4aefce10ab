"""The scheduler: fires each due schedule's occurrence exactly once.

It keeps the active schedules' next due times (unix ms) in a heap, rebuilt from the store
when it (re)starts, and learns of changes by a ``Poke`` naming a schedule (created,
changed, deleted): it reads that row again. A timer on trio's clock wakes it at the
earliest due time; wall time comes from ``runtime.clock.wall`` (tests drive both).

Firing one occurrence (``_fire``): the occurrence fired is the **latest** one due (after
downtime the missed ones collapse into that one: at most one missed occurrence runs), the
creation goes through ``deps.fire`` (the schedules service: the creator's rights, the
concurrency policy, the admission gate), keyed by the schedule and the stored due time so a
repeat after a crash creates nothing new, and then one transaction advances ``next_run_at``
and stores the run, conditional on ``next_run_at`` still being the value read
(``repo.record``). A restart between the creation and that write fires the same key again,
which returns what was created: nothing fires twice.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import assert_never

import trio

from runplane.persistence import Store
from runplane.runtime import Actor, clock
from runplane.schedules import repo
from runplane.schedules.repo import RunRow, ScheduleRow

log = logging.getLogger("runplane.schedules")


@dataclass(frozen=True, slots=True)
class Fired:
    """What became of one occurrence: ``created`` (``ref`` the job or pipeline run),
    ``skipped`` (``detail`` says why) or ``error`` (``status`` and ``detail``)."""

    outcome: str
    ref: str | None = None
    status: int | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Poke:
    """Schedule ``schedule_id`` changed in the store (or went away)."""

    schedule_id: str


@dataclass(frozen=True, slots=True)
class Tick:
    """Fire what is due (sent to self by the timer)."""


SchedulerMsg = Poke | Tick


def wall_ms() -> int:
    return int(clock.wall() * 1000)


@dataclass(frozen=True, slots=True)
class SchedulerDeps:
    store: Store
    #: create the occurrence's job or pipeline run: (schedule, due time fired, key)
    fire: Callable[[ScheduleRow, int, str], Awaitable[Fired]]
    now_ms: Callable[[], int] = wall_ms


@dataclass
class Scheduler(Actor[SchedulerMsg]):
    deps: SchedulerDeps
    #: (due ms, schedule id): the earliest first; stale entries are skipped
    heap: list[tuple[int, str]] = field(default_factory=list)
    #: schedule id -> its next due time as last read
    due: dict[str, int] = field(default_factory=dict)
    timer: trio.CancelScope | None = None
    timer_at: int | None = None
    fired: int = 0

    async def on_start(self) -> None:
        for row in await repo.active(self.deps.store):
            self._track(row.id, row.next_run_at)
        log.info("scheduler rebuilt from the store", extra={"active": len(self.due)})
        self.context.ref.try_tell(Tick())  # what fell due while it was down, first thing

    async def handle(self, msg: SchedulerMsg) -> object:
        match msg:
            case Poke(schedule_id):
                row = await repo.get(self.deps.store, schedule_id, None)
                self._track(schedule_id, row.next_run_at if row is not None else None)
                await self._tick()
            case Tick():
                self.timer, self.timer_at = None, None
                await self._tick()
            case _:
                assert_never(msg)
        return None

    def _track(self, schedule_id: str, next_run_at: int | None) -> None:
        if next_run_at is None:
            self.due.pop(schedule_id, None)
            return
        if self.due.get(schedule_id) != next_run_at:
            self.due[schedule_id] = next_run_at
            heapq.heappush(self.heap, (next_run_at, schedule_id))

    async def _tick(self) -> None:
        """Fire every occurrence due now, then set the timer for the next one."""
        now = self.deps.now_ms()
        while self.heap and self.heap[0][0] <= now:
            due, schedule_id = heapq.heappop(self.heap)
            if self.due.get(schedule_id) != due:
                continue  # changed or gone since it was pushed
            await self._fire(schedule_id, due, now)
        self._arm()

    def _arm(self) -> None:
        while self.heap and self.due.get(self.heap[0][1]) != self.heap[0][0]:
            heapq.heappop(self.heap)
        if not self.heap:
            return
        at = self.heap[0][0]
        if self.timer is not None and self.timer_at == at:
            return
        if self.timer is not None:
            self.timer.cancel()
        self.timer_at = at
        self.timer = self.context.tell_after(max(0, at - self.deps.now_ms()) / 1000, Tick())

    async def _fire(self, schedule_id: str, stored_due: int, now: int) -> None:
        row = await repo.get(self.deps.store, schedule_id, None)
        if row is None or row.next_run_at != stored_due:  # gone or changed meanwhile
            self._track(schedule_id, row.next_run_at if row is not None else None)
            return
        timing = row.timing
        due = timing.latest_at_or_before(now) or stored_due  # missed ones collapse
        key = f"{schedule_id}:{stored_due}"
        try:
            fired = await self.deps.fire(row, due, key)
        except Exception as exc:  # never lose the occurrence silently
            log.exception("schedule fire failed", extra={"schedule_id": schedule_id})
            fired = Fired("error", status=500, detail=f"could not fire: {exc}")
        nxt = timing.next_after(max(now, due))
        run = RunRow(
            schedule_id,
            due,
            self.deps.now_ms(),
            fired.outcome,
            fired.ref,
            fired.status,
            fired.detail,
        )
        moved = await self.deps.store.transaction(repo.record(schedule_id, stored_due, nxt, run))
        if not moved:  # changed by a PATCH meanwhile: its next occurrence is read again
            fresh = await repo.get(self.deps.store, schedule_id, None)
            self._track(schedule_id, fresh.next_run_at if fresh is not None else None)
            return
        self.fired += 1
        self._track(schedule_id, nxt)
        log.info(
            "schedule fired",
            extra={
                "schedule_id": schedule_id,
                "due_at": due,
                "delay_ms": run.fired_at - due,
                "outcome": fired.outcome,
                "ref": fired.ref,
                "next_run_at": nxt,
            },
        )
