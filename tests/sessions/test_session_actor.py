"""The session actor's reaper with trio's autojump clock (no sleeps in real time): idle at
half the TTL, a keepalive wakes it, reaped at the TTL with its job cancelled and the reason
recorded, and a restarted actor keeps the deadline of the stored last keepalive.

The actor runs on a thread-free store stand-in that records the session rows written, so
the autojump clock is exact (a real store's worker threads let it leap over timers)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, cast

import trio

from runplane.actors.session import (
    SESSIONS,
    KeepaliveAsk,
    SessionActor,
    SessionDeps,
    StopAsk,
    Sync,
)
from runplane.persistence import Store
from runplane.runtime import Registry, Supervisor, clock
from runplane.sessions.drivers import Drivers
from runplane.sessions.machine import JobPhase, Phase, SessionState
from runplane.sessions.repo import SessionRow

WALL0 = 3_000_000_000  # unix s at virtual time 0
TTL = 100


def ms(at: float) -> int:
    return int((WALL0 + at) * 1000)


class Rows:
    """What the actor reads and writes: its job's phase, and each session row it saved."""

    def __init__(self, job_phase: str = "queued") -> None:
        self.job_phase = job_phase
        self.saved: list[tuple[float, str, int, str | None]] = []  # (at, phase, keepalive, error)

    async def fetchone(self, sql: str, params: Any = ()) -> dict[str, Any] | None:
        assert sql.startswith("SELECT phase, error FROM jobs")
        return {"phase": self.job_phase, "error": None}

    async def transaction(self, fn: Any) -> Any:
        rows = self

        class Tx:
            def execute(self, sql: str, params: Any = ()) -> int:
                assert sql.startswith("UPDATE sessions SET phase")
                phase, keepalive, _, _, error = params[:5]
                rows.saved.append((clock.now(), phase, keepalive, error))
                return 1

        return fn(Tx())

    def phases(self) -> list[str]:
        return [phase for _, phase, _, _ in self.saved]


def row(last_keepalive: int, phase: Phase = Phase.LAUNCHING) -> SessionRow:
    return SessionRow(
        id="ses_1",
        org_id="org_a",
        project="",
        name="",
        submitted_by="u",
        job_id="job_pod",
        idle_ttl_sec=TTL,
        services=[],
        actions=[],
        teleop_stream="control",
        created_at=last_keepalive,
        state=SessionState(phase, TTL, last_keepalive),
    )


@asynccontextmanager
async def running(rows: Rows, start: SessionRow, cancels: list[float]) -> AsyncIterator[Registry]:
    async def cancel_job(job_id: str) -> None:
        assert job_id == "job_pod"
        cancels.append(clock.now())

    async def kept(session_id: str, at_ms: int) -> None:
        raise AssertionError("durable keepalives here (tests/sessions/test_keepalive_batch.py)")

    deps = SessionDeps(
        store=cast(Store, rows),
        cancel_job=cancel_job,
        kept=kept,
        drivers=Drivers(),
        lazy_from_ttl_sec=10**9,  # every keepalive written at once
    )

    async def activate(session_id: str) -> SessionActor:
        return SessionActor(deps, start)

    sup = Supervisor(name="test")
    registry = Registry(sup)
    registry.register(SESSIONS, activate, idle_timeout=None)
    with clock.override_wall(lambda: WALL0 + clock.now()):
        async with trio.open_nursery() as nursery:
            await nursery.start(sup.run)
            yield registry
            await sup.stop()


async def test_ready_then_idle_at_half_the_ttl_and_a_keepalive_wakes_it(
    autojump_clock: object,
) -> None:
    rows, cancels = Rows(), []
    async with running(rows, row(ms(0)), cancels) as registry:
        await registry.tell(SESSIONS, "ses_1", JobPhase("running", ms(1)))
        await trio.sleep(48)
        await registry.ask(SESSIONS, "ses_1", Sync())
        assert rows.phases() == ["ready"]
        await trio.sleep(3)  # past 50 s
        assert rows.phases() == ["ready", "idle"]
        assert rows.saved[-1][0] == 50
        assert isinstance(await registry.ask(SESSIONS, "ses_1", KeepaliveAsk()), SessionState)
        assert rows.phases()[-1] == "ready" and rows.saved[-1][2] == ms(51)
        await trio.sleep(40)  # 91 s: within half the ttl of the keepalive
        assert rows.phases()[-1] == "ready"
        assert cancels == []


async def test_reaped_at_the_ttl_without_keepalive_its_job_cancelled(
    autojump_clock: object,
) -> None:
    rows, cancels = Rows(), []
    async with running(rows, row(ms(0)), cancels) as registry:
        await registry.tell(SESSIONS, "ses_1", JobPhase("running", ms(1)))
        # keepalives every 40 s keep it past several TTLs
        for _ in range(5):
            await trio.sleep(40)
            assert isinstance(await registry.ask(SESSIONS, "ses_1", KeepaliveAsk()), SessionState)
        assert "stopping" not in rows.phases() and cancels == []
        await trio.sleep(101)  # then silence
        assert rows.phases()[-2:] == ["idle", "stopping"]
        at, _, _, error = rows.saved[-1]
        assert at == 300 and cancels == [300]  # the last keepalive (200 s) + the ttl
        assert error is not None and error.startswith("reaped: no keepalive for 100 s")
        await registry.tell(SESSIONS, "ses_1", JobPhase("cancelled", ms(301)))
        await registry.ask(SESSIONS, "ses_1", Sync())
        assert rows.phases()[-1] == "stopped"
        refused = await registry.ask(SESSIONS, "ses_1", KeepaliveAsk())
        assert refused == "the session is stopped, not live"


async def test_a_restarted_actor_keeps_the_stored_deadline(autojump_clock: object) -> None:
    # the server was down: the session's last keepalive was 90 s before this start
    rows, cancels = Rows(job_phase="running"), []
    async with running(rows, row(ms(-90), Phase.IDLE), cancels) as registry:
        await registry.get(SESSIONS, "ses_1")  # as recovery at start-up does
        await trio.sleep(5)
        assert cancels == []  # 95 s since the keepalive
        await trio.sleep(6)
        assert cancels == [10]  # reaped at 100 s after the stored keepalive
        assert rows.phases()[-1] == "stopping"


async def test_a_deadline_that_passed_while_down_reaps_at_once(autojump_clock: object) -> None:
    rows, cancels = Rows(job_phase="running"), []
    async with running(rows, row(ms(-500), Phase.READY), cancels) as registry:
        await registry.get(SESSIONS, "ses_1")
        await trio.sleep(0.1)
        assert cancels == [0] and rows.phases() == ["stopping"]


async def test_stop_answers_that_the_job_must_be_cancelled_once(autojump_clock: object) -> None:
    rows, cancels = Rows(), []
    async with running(rows, row(ms(0)), cancels) as registry:
        assert await registry.ask(SESSIONS, "ses_1", StopAsk()) is True
        assert await registry.ask(SESSIONS, "ses_1", StopAsk()) is False
        assert cancels == []  # DELETE cancels the job itself (the route's caller waits)
        await registry.tell(SESSIONS, "ses_1", JobPhase("cancelled", ms(1)))
        await registry.ask(SESSIONS, "ses_1", Sync())
        assert rows.phases() == ["stopping", "stopped"]
