"""Cheap keepalives under trio's autojump clock: a keepalive that changes no phase is kept
in the session actor's memory and written by the keepalive log in one batch per period
(never one write per keepalive), a crash loses at most one period, an open driving
connection keeps a session alive without any request and the TTL runs from its close,
and the batch body's checks (422 naming the field).

The actors run on a thread-free store stand-in (as in test_session_actor.py) so the
autojump clock is exact."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import trio

from runplane.actors.keepalives import FlushKeepalives, KeepaliveLog, Kept, LatestKeepalives
from runplane.actors.session import SESSIONS, KeepaliveAsk, SessionActor, SessionDeps, Sync
from runplane.persistence import Store
from runplane.problems import Problem
from runplane.runtime import ActorKind, Registry, Supervisor, clock
from runplane.services.sessions import batch_ids
from runplane.sessions.body import KEEPALIVE_BATCH_MAX
from runplane.sessions.drivers import Drivers
from runplane.sessions.machine import JobPhase, Phase, SessionState
from runplane.sessions.repo import SessionRow
from tests.sessions.test_session_actor import WALL0, ms, row

LOG = ActorKind[Any]("keepalives")
FLUSH = 5.0


@dataclass
class Rows:
    """The stored session row's last_keepalive and phase, and every write made."""

    job_phase: str = "running"
    stored_keepalive: int = 0
    stored_phase: str = "launching"
    phase_writes: list[tuple[float, str]] = field(default_factory=list)
    batches: list[tuple[float, int]] = field(default_factory=list)  # (at, rows)

    async def fetchone(self, sql: str, params: Any = ()) -> dict[str, Any] | None:
        assert sql.startswith("SELECT phase, error FROM jobs")
        return {"phase": self.job_phase, "error": None}

    async def transaction(self, fn: Any) -> Any:
        rows = self

        class Tx:
            def execute(self, sql: str, params: Any = ()) -> int:
                assert sql.startswith("UPDATE sessions SET phase")
                rows.stored_phase, rows.stored_keepalive = params[0], params[1]
                rows.phase_writes.append((clock.now(), params[0]))
                return 1

        return fn(Tx())

    async def execute_many(self, sql: str, seq: Iterable[Any]) -> int:
        assert sql.startswith("UPDATE sessions SET last_keepalive")
        params = list(seq)
        for at, _, _, guard in params:
            if self.stored_keepalive < guard:
                self.stored_keepalive = at
        self.batches.append((clock.now(), len(params)))
        return len(params)


@dataclass
class World:
    registry: Registry
    drivers: Drivers
    cancels: list[float]


@asynccontextmanager
async def running(rows: Rows, start: SessionRow) -> AsyncIterator[World]:
    cancels: list[float] = []
    drivers = Drivers()
    sup = Supervisor(name="test")
    registry = Registry(sup)

    async def cancel_job(job_id: str) -> None:
        cancels.append(clock.now())

    async def kept(session_id: str, at_ms: int) -> None:
        ref = await registry.get(LOG, "all")
        await ref.tell_now(Kept(session_id, at_ms))

    deps = SessionDeps(
        store=cast(Store, rows),
        cancel_job=cancel_job,
        kept=kept,
        drivers=drivers,
        lazy_from_ttl_sec=100,
    )

    async def activate(session_id: str) -> SessionActor:
        return SessionActor(deps, start)

    async def activate_log(_: str) -> KeepaliveLog:
        return KeepaliveLog(cast(Store, rows), FLUSH)

    registry.register(SESSIONS, activate, idle_timeout=None)
    registry.register(LOG, activate_log, idle_timeout=None)
    with clock.override_wall(lambda: WALL0 + clock.now()):
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.run)
            await registry.get(LOG, "all")
            yield World(registry, drivers, cancels)
            await sup.stop()


async def keep(registry: Registry) -> SessionState:
    answer = await registry.ask(SESSIONS, "ses_1", KeepaliveAsk())
    assert isinstance(answer, SessionState), answer
    return answer


async def test_keepalives_are_written_in_one_batch_per_period(autojump_clock: object) -> None:
    rows = Rows(stored_keepalive=ms(0))
    async with running(rows, row(ms(0))) as w:
        await w.registry.tell(SESSIONS, "ses_1", JobPhase("running", ms(0)))
        await w.registry.ask(SESSIONS, "ses_1", Sync())
        assert rows.phase_writes == [(0, "ready")]
        await trio.sleep(0.25)
        for i in range(20):  # 20 keepalives, one every 0.5 s from 0.25 s
            state = await keep(w.registry)
            assert state.last_keepalive == ms(0.25 + i * 0.5) and state.phase is Phase.READY
            await trio.sleep(0.5)
        # none wrote the row itself: the log wrote at most one batch per period
        assert rows.phase_writes == [(0, "ready")]
        assert [at for at, _ in rows.batches] == [5.0, 10.0]
        assert all(n == 1 for _, n in rows.batches)
        assert rows.stored_keepalive == ms(9.75)
        # the views' overlay: what the log has not written yet
        await keep(w.registry)
        pending = await w.registry.ask(LOG, "all", LatestKeepalives())
        assert pending == {"ses_1": ms(10.25)} and rows.stored_keepalive == ms(9.75)
        assert await w.registry.ask(LOG, "all", FlushKeepalives()) == 1
        assert rows.stored_keepalive == ms(10.25)


async def test_the_timers_run_from_the_keepalives_in_memory(autojump_clock: object) -> None:
    rows = Rows(stored_keepalive=ms(0))
    async with running(rows, row(ms(0))) as w:
        await w.registry.tell(SESSIONS, "ses_1", JobPhase("running", ms(0)))
        for _ in range(6):  # every 40 s for 240 s: never idle (at 50 s), never reaped
            await trio.sleep(40)
            await keep(w.registry)
        assert [p for _, p in rows.phase_writes] == ["ready"] and w.cancels == []
        await trio.sleep(51)  # idle 50 s after the last keepalive (240 s)
        assert [p for _, p in rows.phase_writes] == ["ready", "idle"]
        assert rows.phase_writes[-1][0] == 290
        # a keepalive of an idle session changes its phase: written at once
        state = await keep(w.registry)
        assert state.phase is Phase.READY and rows.phase_writes[-1] == (291, "ready")
        assert rows.stored_keepalive == ms(291)
        await trio.sleep(101)
        assert w.cancels == [391]  # reaped at the TTL after the last keepalive


async def test_a_crash_loses_at_most_one_period(autojump_clock: object) -> None:
    rows = Rows(stored_keepalive=ms(0))
    async with running(rows, row(ms(0))) as w:
        await w.registry.tell(SESSIONS, "ses_1", JobPhase("running", ms(0)))
        sent: list[int] = []
        for _ in range(40):  # a keepalive every 0.3 s for 12 s
            await trio.sleep(0.3)
            last = (await keep(w.registry)).last_keepalive
            sent.append(last)
            # what a crash now would leave in the row: every keepalive older than a period
            older = [k for k in sent if k <= ms(clock.now() - FLUSH)]
            assert rows.stored_keepalive >= max(older, default=ms(0))
        assert rows.stored_keepalive < last  # (not written at each keepalive)
    assert rows.stored_keepalive == last  # the orderly stop's flush
    # a session rebuilt from a row one period old keeps the deadline of that row
    t0 = trio.current_time()
    rows2 = Rows(stored_keepalive=ms(t0 - FLUSH))
    async with running(rows2, row(ms(t0 - FLUSH), Phase.READY)) as w:
        await w.registry.get(SESSIONS, "ses_1")
        await trio.sleep(44.9)  # idle 50 s after the stored keepalive
        assert rows2.phase_writes == []
        await trio.sleep(0.2)
        assert [p for _, p in rows2.phase_writes] == ["idle"]


async def test_an_open_driving_connection_keeps_the_session_alive(
    autojump_clock: object,
) -> None:
    rows = Rows(stored_keepalive=ms(0))
    async with running(rows, row(ms(0))) as w:
        await w.registry.tell(SESSIONS, "ses_1", JobPhase("running", ms(0)))
        await w.registry.ask(SESSIONS, "ses_1", Sync())
        w.drivers.opened("ses_1")
        w.drivers.opened("ses_1")  # two connections
        await trio.sleep(500)  # five TTLs, no request
        assert [p for _, p in rows.phase_writes] == ["ready"] and w.cancels == []
        w.drivers.closed("ses_1", ms(500))
        await trio.sleep(200)  # one is still open
        assert w.cancels == [] and w.drivers.count("ses_1") == 1
        w.drivers.closed("ses_1", ms(700))
        await trio.sleep(49)
        assert [p for _, p in rows.phase_writes] == ["ready"]
        await trio.sleep(2)  # idle 50 s after the last close
        assert [p for _, p in rows.phase_writes] == ["ready", "idle"]
        await trio.sleep(50)
        assert w.cancels == [800]  # reaped a TTL after the last connection closed
        assert [p for _, p in rows.phase_writes] == ["ready", "idle", "stopping"]


async def test_a_connection_to_an_idle_session_counts_when_the_timer_fires(
    autojump_clock: object,
) -> None:
    rows = Rows(stored_keepalive=ms(0))
    async with running(rows, row(ms(0), Phase.IDLE)) as w:
        await w.registry.get(SESSIONS, "ses_1")
        await trio.sleep(90)
        w.drivers.opened("ses_1")
        await trio.sleep(300)
        # at the reap deadline (100 s) the open connection kept it: ready again, not reaped
        assert w.cancels == [] and rows.stored_phase == "ready"
        assert rows.phase_writes[0] == (100, "ready")


def test_the_batch_body_checks_name_the_field() -> None:
    good = ["ses_01jd8x3k2m7f4q9w5e6r8t0yzb", "ses_01jd8x3k2m7f4q9w5e6r8t0yzc"]
    assert batch_ids([*good, good[0]]) == good
    with pytest.raises(Problem) as bad:
        batch_ids([good[0], "job_01jd8x3k2m7f4q9w5e6r8t0yzb"])
    assert bad.value.status == 422 and [e.key for e in bad.value.errors] == ["ids[1]"]
    with pytest.raises(Problem) as many:
        batch_ids([good[0]] * (KEEPALIVE_BATCH_MAX + 1))
    assert many.value.status == 422 and [e.key for e in many.value.errors] == ["ids"]
