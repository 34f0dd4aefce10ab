"""The scheduler actor under trio's clock (autojump, with a small threshold so the store's
writer thread finishes before time jumps), on a real store: an interval fires each
occurrence once and on time, a suspended schedule stops, a restart fires nothing twice
(a fire cut short by a crash is fired again under the same key, which the submit path
dedupes), and after downtime exactly one missed occurrence fires.

The fire itself (the creator's rights, concurrency, the submit) is the schedules
service's: tests/http/test_schedules_routes.py; here a recorder stands in for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

import pytest
import trio
import trio.testing

from runplane.actors.scheduler import Fired, Poke, Scheduler, SchedulerDeps, SchedulerMsg
from runplane.persistence import Store
from runplane.runtime import ActorRef, ChildSpec, Supervisor, clock
from runplane.schedules import repo
from runplane.schedules.repo import ScheduleRow
from tests.actors.harness import store

BASE_S = 1_800_000_000  # unix seconds at trio time 0


@pytest.fixture
def slow_autojump() -> trio.testing.MockClock:
    return trio.testing.MockClock(autojump_threshold=0.01)


@pytest.fixture
def wall(slow_autojump: trio.testing.MockClock) -> Iterator[None]:
    with clock.override_wall(lambda: BASE_S + trio.current_time()):
        yield


__all__ = ["store"]  # the fixture

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)


def now_ms() -> int:
    return int(clock.wall() * 1000)


@dataclass
class Recorder:
    """Stands in for the schedules service's fire: records (schedule, due, key)."""

    calls: list[tuple[str, int, str]] = field(default_factory=list)
    hang_first: bool = False

    async def fire(self, row: ScheduleRow, due: int, key: str) -> Fired:
        self.calls.append((row.id, due, key))
        if self.hang_first and len(self.calls) == 1:
            await trio.sleep_forever()  # the server dies mid-fire
        return Fired("created", ref=f"job_{len(self.calls)}")


async def every(store: Store, sid: str, seconds: int, *, anchor: int | None = None) -> ScheduleRow:
    at = now_ms() if anchor is None else anchor
    row = ScheduleRow(
        id=sid,
        org_id="org_a",
        name=sid,
        cron=None,
        every_sec=seconds,
        timezone="UTC",
        anchor=at,
        kind="job",
        body={"spec": {"stack": "shell"}, "origin": ""},
        concurrency="allow",
        suspend=False,
        created_by="usr_a",
        credential="admin",
        credential_id=None,
        created_at=at,
        updated_at=at,
        next_run_at=at + seconds * 1000,
    )
    await repo.insert(store, row)
    return row


@asynccontextmanager
async def scheduler(store: Store, recorder: Recorder) -> AsyncIterator[ActorRef[SchedulerMsg]]:
    sup = Supervisor(name="test")
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        try:
            yield await sup.start_child(
                ChildSpec("scheduler", lambda: Scheduler(SchedulerDeps(store, recorder.fire)))
            )
        finally:
            with trio.CancelScope(shield=True):
                await sup.stop()
            nursery.cancel_scope.cancel()


async def runs(store: Store, sid: str) -> list[repo.RunRow]:
    return sorted(await repo.runs(store, sid), key=lambda r: r.due_at)


async def test_every_2s_fires_three_times_in_6s_each_once_and_on_time(
    store: Store, wall: None, slow_autojump: trio.testing.MockClock
) -> None:
    recorder = Recorder()
    row = await every(store, "sch_a", 2)
    async with scheduler(store, recorder):
        await trio.sleep(6.5)
    dues = [due for _, due, _ in recorder.calls]
    assert dues == [row.anchor + 2000, row.anchor + 4000, row.anchor + 6000]
    assert len({key for _, _, key in recorder.calls}) == 3
    stored = await runs(store, "sch_a")
    assert [r.due_at for r in stored] == dues and all(r.outcome == "created" for r in stored)
    assert all(0 <= r.fired_at - r.due_at < 1000 for r in stored)  # mock time: no real lag
    fresh = await repo.get(store, "sch_a", None)
    assert fresh is not None and fresh.next_run_at == row.anchor + 8000
    assert fresh.last_run_at == stored[-1].fired_at


async def test_a_suspended_schedule_stops_and_a_resumed_one_goes_on(
    store: Store, wall: None, slow_autojump: trio.testing.MockClock
) -> None:
    recorder = Recorder()
    row = await every(store, "sch_b", 2)
    async with scheduler(store, recorder) as ref:
        await trio.sleep(2.5)
        assert len(recorder.calls) == 1
        await repo.replace_row(store, replace(row, suspend=True, next_run_at=None))
        await ref.tell(Poke("sch_b"))
        await trio.sleep(10)
        assert len(recorder.calls) == 1
        resumed_at = now_ms()
        await repo.replace_row(
            store, replace(row, anchor=resumed_at, next_run_at=resumed_at + 2000)
        )
        await ref.tell(Poke("sch_b"))
        await trio.sleep(2.5)
        assert [due for _, due, _ in recorder.calls][1:] == [resumed_at + 2000]


async def test_a_restart_fires_nothing_twice(
    store: Store, wall: None, slow_autojump: trio.testing.MockClock
) -> None:
    recorder = Recorder(hang_first=True)
    await every(store, "sch_c", 2)
    async with scheduler(store, recorder):
        await trio.sleep(2.5)  # the first fire hangs: the server dies before its write
    assert len(recorder.calls) == 1 and await runs(store, "sch_c") == []
    async with scheduler(store, recorder):
        await trio.sleep(0.5)  # back: the cut-short occurrence fires again...
        assert len(recorder.calls) == 2
        assert recorder.calls[1][2] == recorder.calls[0][2]  # ...under the same key
        assert [r.due_at for r in await runs(store, "sch_c")] == [recorder.calls[1][1]]
    # plain restarts, with occurrences falling due around them: each fires once
    for pause in (0.3, 2.2, 0.1, 3.0):
        async with scheduler(store, recorder):
            await trio.sleep(pause)
    later = recorder.calls[1:]
    assert len(later) >= 3
    dues = [due for _, due, _ in later]
    assert len(set(dues)) == len(dues) and len({k for _, _, k in later}) == len(later)
    assert [r.due_at for r in await runs(store, "sch_c")] == dues  # each stored once


async def test_after_downtime_exactly_one_missed_occurrence_fires(store: Store, wall: None) -> None:
    recorder = Recorder()
    down_since = now_ms() - 60_000  # ten 6 s periods were missed
    await every(store, "sch_d", 6, anchor=down_since - 6_000)
    now = now_ms()
    async with scheduler(store, recorder):
        await trio.sleep(1)
        assert len(recorder.calls) == 1
        ((_, due, _),) = recorder.calls
        assert now - 6_000 < due <= now  # the latest missed one
        fresh = await repo.get(store, "sch_d", None)
        assert fresh is not None and fresh.next_run_at is not None
        assert now < fresh.next_run_at <= now + 6_000
        await trio.sleep(6)
        assert len(recorder.calls) == 2  # then on its period again
