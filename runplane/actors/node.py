"""The node actor: one per connected node agent, owning the node's session and liveness.

It holds the outbox of the node's current WebSocket session, tracks heartbeats and the
job attempts sent to the node, and decides when the node is lost: no heartbeat (or no
connection) for ``grace`` seconds. A lost node's attempts go back to their job actors as
``LoseAttempt`` (requeue, attempts + 1) and the node leaves the placement fleet. A
reconnect within the grace period resumes the session: the agent lists what it still runs,
anything the server expected but the agent lacks is lost, anything the agent runs that
the server no longer wants is cancelled.

Heartbeats: liveness reads ``last_seen`` (the trio clock) only, kept here. The wall time
of the last beat (``nodes.last_heartbeat``) is not written per beat: it goes to
``NodeDeps.record_beat``, the fleet's heartbeat log (``runplane/actors/fleet.py``), which
writes all nodes' latest beats in one batch every few seconds. A status change
(online, disconnected, offline) still writes at once, and carries the last beat with it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import trio

from runplane.agent import protocol as p
from runplane.persistence import Store, from_json, now_ms
from runplane.placement import Gpu, NodeShape
from runplane.runtime import Actor, clock

log = logging.getLogger("runplane.nodes")


# messages -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attach:
    outbox: trio.MemorySendChannel[str]
    hello: p.Hello


@dataclass(frozen=True, slots=True)
class Detach:
    outbox: trio.MemorySendChannel[str]


@dataclass(frozen=True, slots=True)
class Beat:
    running: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class Deliver:
    msg: p.Run | p.Cancel | p.FinishedAck


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    job_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Tick:
    """Periodic liveness check (sent to self)."""


@dataclass(frozen=True, slots=True)
class Refresh:
    """Node row changed (patch, overrides): re-announce the shape to placement."""


NodeMsg = Attach | Detach | Beat | Deliver | AttemptEnded | Tick | Refresh


@dataclass(frozen=True, slots=True)
class NodeDeps:
    store: Store
    grace: float  # seconds without heartbeat/connection before the node is lost
    node_up: Callable[[NodeShape], Awaitable[None]]
    node_down: Callable[[str], Awaitable[None]]
    lose_attempt: Callable[[str, int, str], Awaitable[None]]
    #: the attempts the server believes run on this node (from the jobs table)
    expected: Callable[[str], Awaitable[dict[str, int]]]
    #: where the wall time (unix ms) of each heartbeat goes: the fleet's batching heartbeat
    #: log (``Fleet.record_beat``)
    record_beat: Callable[[str, int], Awaitable[None]]


def shape_from_row(row: dict[str, Any], reliability: float) -> NodeShape:
    facts = from_json(row["facts"])
    overrides = from_json(row["overrides"]) or {}
    cpu = facts.get("cpu_cores", 1)
    ram = facts.get("ram_gb", 0)
    return NodeShape(
        id=row["id"],
        tier=row["tier"],
        disabled=bool(row["disabled"]),
        cpu_cores=float(min(cpu, overrides.get("cpu_cap") or cpu)),
        ram_gb=float(min(ram, overrides.get("ram_cap") or ram)),
        disk_gb=float(facts.get("disk_gb", 0)),
        gpus=tuple(
            Gpu(
                model=g.get("model", ""),
                vendor=g.get("vendor", "nvidia"),
                vram_gb=float(g.get("vram_gb", 0)),
                cuda=g.get("cuda", ""),
            )
            for g in facts.get("gpus", [])
        ),
        arch=facts.get("arch", "x86_64"),
        os=facts.get("os", "linux"),
        capabilities=frozenset(facts.get("capabilities", [])),
        max_concurrency=int(overrides.get("max_concurrency") or facts.get("max_concurrency", 1)),
        dlperf=float(facts.get("dlperf", 0.0)),
        reliability=reliability,
    )


def reliability_of(row: dict[str, Any]) -> float:
    """Share of the attempts placed on the node that it did not lose (1.0 with none yet)."""
    total = row.get("attempts_total") or 0
    return 1.0 if total == 0 else max(0.0, 1.0 - (row.get("attempts_lost") or 0) / total)


class NodeActor(Actor[NodeMsg]):
    def __init__(self, deps: NodeDeps, node_id: str) -> None:
        self.deps = deps
        self.node_id = node_id
        self.outbox: trio.MemorySendChannel[str] | None = None
        self.last_seen = clock.now()  # liveness (monotonic): the grace clock reads this
        self.last_beat_ms: int | None = None  # wall time of the last hello or beat
        self.attempts: dict[str, int] = {}
        self.lost = False

    async def on_start(self) -> None:
        self.attempts = await self.deps.expected(self.node_id)
        self.last_seen = clock.now()
        self.context.start_soon(self._watch)

    async def _watch(self) -> None:
        """Liveness: sleep until the grace period after the last sign of life would end,
        and only then have the actor check (a beat meanwhile just moves the deadline). One
        long-lived task and one wake-up per grace period, instead of a timer task per tick;
        a silent node is lost exactly ``grace`` seconds after its last beat."""
        while not self.lost:
            deadline = self.last_seen + self.deps.grace
            if clock.now() < deadline:
                await trio.sleep_until(deadline)
                continue
            await self.context.ref.ask(Tick(), timeout=None)

    def can_passivate(self) -> bool:
        return False  # ends itself when the node is lost

    async def handle(self, msg: NodeMsg) -> Any:
        match msg:
            case Attach(outbox, hello):
                return await self._attach(outbox, hello)
            case Detach(outbox):
                if outbox is self.outbox:
                    self.outbox = None
                    log.info("node disconnected", extra={"node_id": self.node_id})
                    await self._set_status("disconnected")
                return None
            case Beat():
                self.last_seen = clock.now()
                self.last_beat_ms = wall_ms()
                await self.deps.record_beat(self.node_id, self.last_beat_ms)
                return None
            case Deliver(order):
                return self._deliver(order)
            case AttemptEnded(job_id, attempt):
                if self.attempts.get(job_id) == attempt:
                    del self.attempts[job_id]
                return None
            case Tick():
                await self._check()
                return None
            case Refresh():
                row = await self._row()
                if row is not None and self.outbox is not None:
                    await self.deps.node_up(shape_from_row(row, reliability_of(row)))
                return None

    def _deliver(self, order: p.Run | p.Cancel | p.FinishedAck) -> bool:
        if isinstance(order, p.Run):
            self.attempts[order.job_id] = order.attempt
        if self.outbox is None:
            return False
        try:
            self.outbox.send_nowait(p.encode(order))
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            return False
        return True

    async def _attach(self, outbox: trio.MemorySendChannel[str], hello: p.Hello) -> None:
        if self.outbox is not None and self.outbox is not outbox:
            self.outbox.close()  # the old session is stale: its writer ends and closes it
        self.outbox = outbox
        self.last_seen = clock.now()
        self.last_beat_ms = wall_ms()  # the hello counts as a beat
        # supersedes a beat of the previous session still waiting for its batch
        await self.deps.record_beat(self.node_id, self.last_beat_ms)
        reported = {r.job_id: r.attempt for r in hello.running}
        for job_id, attempt in list(self.attempts.items()):
            if reported.get(job_id) != attempt:
                del self.attempts[job_id]
                await self.deps.lose_attempt(
                    job_id, attempt, f"node {self.node_id} reconnected without the job"
                )
        for job_id, attempt in reported.items():
            if self.attempts.get(job_id) != attempt:
                self._deliver(p.Cancel(job_id=job_id, attempt=attempt))
        await self._set_status("online")
        row = await self._row()
        assert row is not None
        await self.deps.node_up(shape_from_row(row, reliability_of(row)))
        log.info(
            "node attached",
            extra={"node_id": self.node_id, "resumed": sorted(self.attempts)},
        )

    async def _check(self) -> None:
        silent = clock.now() - self.last_seen
        if silent < self.deps.grace:
            return
        if self.outbox is not None:
            log.warning(
                "node silent, closing its session",
                extra={"node_id": self.node_id, "silent_sec": round(silent, 1)},
            )
            self.outbox.close()
            self.outbox = None
        self.lost = True
        reason = f"node {self.node_id} lost: no heartbeat for {silent:.0f} s"
        log.warning("node lost", extra={"node_id": self.node_id, "jobs": sorted(self.attempts)})
        await self.deps.node_down(self.node_id)
        await self._set_status("offline")
        for job_id, attempt in list(self.attempts.items()):
            await self.deps.lose_attempt(job_id, attempt, reason)
        self.attempts.clear()
        self.context.stop()

    async def _row(self) -> dict[str, Any] | None:
        return await self.deps.store.fetchone("SELECT * FROM nodes WHERE id = ?", (self.node_id,))

    async def _set_status(self, status: str) -> None:
        """Written at once (not batched), with the last beat: after a crash the row says
        when a disconnected or lost node was last heard from (a node activated at
        start-up and never attached keeps the row's beat)."""
        await self.deps.store.execute(
            "UPDATE nodes SET status = ?, updated_at = ?,"
            " last_heartbeat = COALESCE(?, last_heartbeat) WHERE id = ?",
            (status, now_ms(), self.last_beat_ms, self.node_id),
        )


def wall_ms() -> int:
    """Wall-clock unix ms of a heartbeat, from the runtime's clock (tests pin it)."""
    return int(clock.wall() * 1000)
