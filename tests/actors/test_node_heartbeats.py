"""Node heartbeats: the node actor keeps liveness in memory and hands each beat to the
fleet's heartbeat log, which writes the nodes' latest beats in one batch per interval and
on an orderly stop; status changes still write at once (with the last beat); node loss
after three missed beats keeps its timing; node views overlay the beats not written yet.

The timing tests run on a thread-free recording store so trio's autojump clock is exact
(a real store's worker threads let the autojump clock leap over timers while a write is
in flight). The real-store test runs on every backend, with no timers at all.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

from runplane.actors.heartbeats import FlushBeats
from runplane.actors.node import NODES, Beat, Detach, NodeDeps
from runplane.agent import protocol as p
from runplane.nodes.enrollment import NodeIdentity
from runplane.persistence import Params, Row, Store, StoreStatistics, Tx, to_json
from runplane.runtime import Registry, Supervisor, clock
from runplane.services.fleet import BEATS_ID, HEARTBEATS, Fleet
from runplane.settings import load_settings
from runplane.timefmt import iso_ms_or_none

#: Wall time (unix s) at virtual time 0: beats are stamped WALL0 + trio time, exactly.
WALL0 = 3_000_000_000
HEARTBEAT = 5.0
GRACE = 3 * HEARTBEAT  # as Root wires it: three missed beats


def wall_ms(at: float) -> int:
    """The ``last_heartbeat`` of a beat handled at virtual time ``at``."""
    return int((WALL0 + at) * 1000)


def hello(name: str, running: Iterable[tuple[str, int]] = ()) -> p.Hello:
    return p.Hello(
        protocol=p.PROTOCOL_VERSION,
        agent_version="test",
        facts=p.Facts(name=name, cpu_cores=2, ram_gb=4, arch="x86_64", os="linux"),
        running=[p.RunningJob(job_id=j, attempt=a) for j, a in running],
    )


@dataclass
class Write:
    at: float  # virtual time the write was submitted
    sql: str
    rows: list[tuple[Any, ...]]
    many: bool


class RecordingStore(Store):
    """Records writes, answers the node row; no threads, so the autojump clock is exact."""

    kind = "memory"
    durable = False
    supports_identity = False

    def __init__(self) -> None:
        self.writes: list[Write] = []
        self.fail_next_many = 0
        self.hang_many = False

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def fetchone(self, sql: str, params: Params = ()) -> Row | None:
        await trio.lowlevel.checkpoint()
        assert sql.startswith("SELECT * FROM nodes"), sql
        return {
            "id": params[0],
            "org_id": "org_test",
            "name": params[0],
            "tier": "community",
            "disabled": 0,
            "facts": to_json({"cpu_cores": 2, "ram_gb": 4}),
            "overrides": "{}",
            "agent_version": "0",
            "channel": "stable",
            "status": "online",
            "attempts_total": 0,
            "attempts_lost": 0,
            "attempts_ok": 0,
            "last_heartbeat": None,
            "created_at": 0,
            "updated_at": 0,
        }

    async def fetchall(self, sql: str, params: Params = ()) -> list[Row]:
        await trio.lowlevel.checkpoint()
        return []

    async def execute(self, sql: str, params: Params = ()) -> int:
        await trio.lowlevel.checkpoint()
        self.writes.append(Write(clock.now(), sql, [tuple(params)], many=False))
        return 1

    async def execute_many(self, sql: str, seq_of_params: Iterable[Params]) -> int:
        await trio.lowlevel.checkpoint()
        if self.hang_many:
            await trio.sleep_forever()
        if self.fail_next_many:
            self.fail_next_many -= 1
            raise OSError("disk on fire")
        rows = [tuple(r) for r in seq_of_params]
        self.writes.append(Write(clock.now(), sql, rows, many=True))
        return len(rows)

    async def transaction(self, fn: Callable[[Tx], Any]) -> Any:
        raise NotImplementedError

    def statistics(self) -> StoreStatistics:
        return StoreStatistics(0, len(self.writes), 1, 0, 0, 0)

    # what the tests look at ---------------------------------------------------------

    def batches(self) -> list[Write]:
        """The batched heartbeat writes."""
        return [w for w in self.writes if w.many]

    def beat_updates(self) -> list[Write]:
        """Single-row writes of last_heartbeat alone (the per-beat UPDATE of before)."""
        return [w for w in self.writes if not w.many and w.sql.startswith("UPDATE nodes SET last_")]

    def statuses(self, node_id: str) -> list[tuple[float, str, int | None]]:
        """(time, status, last_heartbeat written with it) of each status write."""
        out = []
        for w in self.writes:
            if w.sql.startswith("UPDATE nodes SET status") and w.rows[0][-1] == node_id:
                row = w.rows[0]
                out.append((w.at, row[0], row[2] if len(row) == 4 else None))
        return out


@dataclass
class Harness:
    fleet: Fleet
    registry: Registry
    supervisor: Supervisor
    outboxes: list[Any] = field(default_factory=list)
    down: list[tuple[float, str]] = field(default_factory=list)
    lost: list[tuple[float, str, int]] = field(default_factory=list)
    expected: dict[str, dict[str, int]] = field(default_factory=dict)

    async def connect(self, node_id: str, running: Iterable[tuple[str, int]] = ()) -> Any:
        send, receive = trio.open_memory_channel[str](64)
        self.outboxes.append(receive)
        identity = NodeIdentity(node_id=node_id, tier="community", org_id="org_test")
        return await self.fleet.attach(identity, hello(node_id, running), send), send


@asynccontextmanager
async def fleet_on(
    store: Store, tmp_path: Path, *, flush: float, grace: float = GRACE
) -> AsyncIterator[Harness]:
    """A fleet (node actors + heartbeat log) under an ``actors`` supervisor, as Root wires
    it, with recording callbacks for placement and the job actors."""
    sup = Supervisor(name="actors", intensity=1000, period=1.0)
    registry = Registry(sup)
    settings = load_settings({"RUNPLANE_DATA_DIR": str(tmp_path / "data")})
    fleet = Fleet(settings, store, registry, beat_flush_sec=flush)
    h = Harness(fleet, registry, sup)

    async def node_up(shape: Any) -> None:
        await trio.lowlevel.checkpoint()

    async def node_down(node_id: str) -> None:
        await trio.lowlevel.checkpoint()
        h.down.append((clock.now(), node_id))

    async def lose_attempt(job_id: str, attempt: int, reason: str) -> None:
        await trio.lowlevel.checkpoint()
        h.lost.append((clock.now(), job_id, attempt))

    async def expected(node_id: str) -> dict[str, int]:
        await trio.lowlevel.checkpoint()
        return dict(h.expected.get(node_id, {}))

    fleet.register(
        NodeDeps(
            store=store,
            grace=grace,
            node_up=node_up,
            node_down=node_down,
            lose_attempt=lose_attempt,
            expected=expected,
            record_beat=fleet.record_beat,
        )
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(sup.run)
        await registry.get(HEARTBEATS, BEATS_ID)  # as Fleet.recover: the flush timer starts
        try:
            yield h
        finally:
            with trio.CancelScope(shield=True):
                await sup.stop()


@pytest.fixture
def recording() -> RecordingStore:
    return RecordingStore()


@pytest.fixture(autouse=True)
def pinned_wall() -> Iterable[None]:
    with clock.override_wall(lambda: WALL0 + clock.now()):
        yield


# batching -------------------------------------------------------------------------------


async def test_beats_are_written_in_one_batch_per_interval_with_the_latest_beat(
    recording: RecordingStore, tmp_path: Path, autojump_clock: object
) -> None:
    async with fleet_on(recording, tmp_path, flush=HEARTBEAT) as h:
        a, _ = await h.connect("node_a")
        b, _ = await h.connect("node_b")
        await trio.sleep_until(1.0)
        await a.ask(Beat(()))
        await trio.sleep_until(2.0)
        await b.ask(Beat(()))
        await trio.sleep_until(3.0)
        await a.ask(Beat(()))  # a's second beat: the one that is written
        await trio.sleep_until(4.5)
        assert recording.batches() == []  # nothing written per beat, nor before the interval
        assert recording.beat_updates() == []

        await trio.sleep_until(5.5)  # the flush at 5 s
        [batch] = recording.batches()
        assert batch.at == 5.0
        assert batch.sql == "UPDATE nodes SET last_heartbeat = ? WHERE id = ?"
        assert sorted(batch.rows) == [(wall_ms(2.0), "node_b"), (wall_ms(3.0), "node_a")]

        await trio.sleep_until(10.5)  # nobody beat: no write at 10 s
        assert len(recording.batches()) == 1
        await a.ask(Beat(()))
        await trio.sleep_until(15.5)
        assert recording.batches()[1].rows == [(wall_ms(10.5), "node_a")]
        assert recording.batches()[1].at == 15.0
        assert recording.beat_updates() == []


async def test_an_orderly_stop_flushes_the_pending_beats(
    recording: RecordingStore, tmp_path: Path, autojump_clock: object
) -> None:
    async with fleet_on(recording, tmp_path, flush=3600.0) as h:
        a, _ = await h.connect("node_a")
        await trio.sleep_until(7.0)
        await a.ask(Beat(()))
        await trio.sleep_until(12.0)
        await a.ask(Beat(()))
        await trio.sleep_until(20.0)
        assert recording.batches() == []
        await h.supervisor.stop()  # as Root.stop (the server's shutdown)
        [batch] = recording.batches()
        assert batch.rows == [(wall_ms(12.0), "node_a")]
        assert batch.at == 20.0


async def test_a_failed_flush_keeps_the_beats_for_the_next_one(
    recording: RecordingStore, tmp_path: Path, autojump_clock: object
) -> None:
    recording.fail_next_many = 1
    async with fleet_on(recording, tmp_path, flush=HEARTBEAT) as h:
        a, _ = await h.connect("node_a")
        b, _ = await h.connect("node_b")
        await trio.sleep_until(1.0)
        await a.ask(Beat(()))
        await b.ask(Beat(()))
        await trio.sleep_until(6.0)
        await a.ask(Beat(()))  # newer than the one that failed to be written
        assert recording.batches() == []  # the 5 s flush failed
        await trio.sleep_until(10.5)
        [batch] = recording.batches()
        assert batch.at == 10.0
        assert sorted(batch.rows) == [(wall_ms(1.0), "node_b"), (wall_ms(6.0), "node_a")]


# status changes -------------------------------------------------------------------------


async def test_status_changes_write_at_once_with_the_last_beat(
    recording: RecordingStore, tmp_path: Path, autojump_clock: object
) -> None:
    async with fleet_on(recording, tmp_path, flush=3600.0) as h:
        await trio.sleep_until(1.0)
        a, outbox = await h.connect("node_a")
        assert recording.statuses("node_a") == [(1.0, "online", wall_ms(1.0))]  # hello
        await trio.sleep_until(2.0)
        await a.ask(Beat(()))
        await trio.sleep_until(3.0)
        await a.ask(Detach(outbox))  # the session ended: written before the ask returns
        assert recording.statuses("node_a")[-1] == (3.0, "disconnected", wall_ms(2.0))
        assert recording.batches() == []  # the batch is not what wrote it
        a, outbox = await h.connect("node_a")  # back within the grace period
        assert recording.statuses("node_a")[-1] == (3.0, "online", wall_ms(3.0))


# liveness -------------------------------------------------------------------------------


async def test_node_loss_after_three_missed_beats_keeps_its_timing(
    recording: RecordingStore, tmp_path: Path, autojump_clock: object
) -> None:
    async with fleet_on(recording, tmp_path, flush=HEARTBEAT) as h:
        h.expected["node_a"] = {"job_1": 1}
        a, _ = await h.connect("node_a", running=[("job_1", 1)])  # at 0
        beats = [2.5 + HEARTBEAT * i for i in range(12)]  # a minute of beats: 2.5 ... 57.5
        for at in beats:
            await trio.sleep_until(at)
            await a.ask(Beat((("job_1", 1),)))
        await trio.sleep_until(beats[-1] + GRACE - 0.1)  # silent for just under 15 s
        assert h.down == [] and h.lost == []
        assert h.registry.active(NODES, "node_a")

        await trio.sleep_until(beats[-1] + GRACE + HEARTBEAT)
        # lost when 15 s of silence are over: 57.5 + 15 = 72.5
        assert h.down == [(72.5, "node_a")]
        assert h.lost == [(72.5, "job_1", 1)]
        assert recording.statuses("node_a")[-1] == (72.5, "offline", wall_ms(beats[-1]))
        assert not h.registry.active(NODES, "node_a")
        # the beats were written in batches, one per interval at most (none per beat)
        assert recording.beat_updates() == []
        assert len(recording.batches()) <= 60 / HEARTBEAT + 1


async def test_liveness_does_not_wait_for_a_stuck_heartbeat_write(
    recording: RecordingStore, tmp_path: Path, autojump_clock: object
) -> None:
    """Liveness never waits for the heartbeat log: with its write stuck (a store that
    never answers), beats still keep the node alive and silence still loses it on time."""
    recording.hang_many = True
    async with fleet_on(recording, tmp_path, flush=HEARTBEAT) as h:
        a, _ = await h.connect("node_a")
        for at in (4.0, 9.0, 14.0, 19.0):  # the log is stuck in its 5 s flush from 5 s on
            await trio.sleep_until(at)
            with trio.fail_after(0.001):  # the beat is handled at once (virtual time)
                await a.ask(Beat(()))
        await trio.sleep_until(33.9)
        assert h.down == []
        await trio.sleep_until(36.0)
        assert h.down == [(34.0, "node_a")]  # 19 + 15
        assert recording.batches() == []


# a real store, every backend ------------------------------------------------------------


async def test_views_overlay_pending_beats_and_the_rows_get_them(
    store: Store, tmp_path: Path
) -> None:
    """No timers run here (the log never flushes by itself; wall time is stepped by hand):
    the test asks for a flush, then stops the fleet, and reads the rows each time."""
    wall = [float(WALL0)]
    with clock.override_wall(lambda: wall[0]):
        async with fleet_on(store, tmp_path, flush=float("inf"), grace=3600.0) as h:
            a, _ = await h.connect("node_a")
            await h.connect("node_b")
            row = await store.fetchone("SELECT * FROM nodes WHERE id = ?", ("node_a",))
            assert row is not None and row["status"] == "online"
            assert row["last_heartbeat"] == WALL0 * 1000  # the hello, written with the status

            wall[0] += 1
            await a.ask(Beat(()))
            assert await pending(h, "node_a") == (WALL0 + 1) * 1000
            rows = {r["id"]: r["last_heartbeat"] for r in await raw_rows(store)}
            views = {v["id"]: v["last_heartbeat"] for v in await h.fleet.views()}
            assert rows["node_a"] == WALL0 * 1000  # not written yet ...
            assert views["node_a"] == iso_ms_or_none((WALL0 + 1) * 1000)  # ... but shown

            written = await h.registry.ask(HEARTBEATS, BEATS_ID, FlushBeats())
            assert written == 2  # node_b's hello was pending too
            rows = {r["id"]: r["last_heartbeat"] for r in await raw_rows(store)}
            assert rows == {"node_a": (WALL0 + 1) * 1000, "node_b": WALL0 * 1000}
            assert await pending(h, "node_a") is None
            views = {v["id"]: v["last_heartbeat"] for v in await h.fleet.views()}
            assert views["node_a"] == iso_ms_or_none((WALL0 + 1) * 1000)

            wall[0] += 1
            await a.ask(Beat(()))
            assert await pending(h, "node_a") == (WALL0 + 2) * 1000
        # the fleet stopped in order: the last beat was flushed
        rows = {r["id"]: r["last_heartbeat"] for r in await raw_rows(store)}
        assert rows["node_a"] == (WALL0 + 2) * 1000


async def pending(h: Harness, node_id: str) -> int | None:
    return (await h.fleet.latest_beats()).get(node_id)


async def raw_rows(store: Store) -> list[Row]:
    return await store.fetchall("SELECT id, status, last_heartbeat FROM nodes ORDER BY id")
