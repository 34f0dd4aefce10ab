"""The fleet service: node enrollment on connect, node actors, deliveries, node views.

It also owns the heartbeat log, the actor that persists the beats in
``nodes.last_heartbeat`` (a status change writes it too, at once: see ``node.py``):
node actors report each beat's wall time to it (a message, no write), and it writes the
latest beat of every node that beat since the last batch in one ``execute_many`` every
``beat_flush_sec`` (5 s), and once more on an orderly stop. Node views overlay the beats
not written yet, so ``GET /v1/nodes`` shows the last beat received, as before. A crash
of the server (or of the log, which restarts empty) loses at most one interval of
``last_heartbeat`` values: the rows then show a beat up to 5 s older (after a server
restart every node is offline until its agent says hello again anyway). Liveness
(node loss after three missed beats) never reads the row: the node actor's in-memory
``last_seen`` decides it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from runplane import enrollment
from runplane.actors import placement as pl
from runplane.actors.node import (
    Attach,
    Deliver,
    NodeActor,
    NodeDeps,
    Refresh,
    reliability_of,
)
from runplane.agent import protocol as p
from runplane.jobs.phase import ON_NODE
from runplane.persistence import Store, from_json, now_ms, to_json
from runplane.runtime import Actor, ActorError, ActorGone, ActorRef, MailboxClosed, Registry
from runplane.settings import Settings
from runplane.timefmt import iso_ms_or_none

log = logging.getLogger("runplane.nodes")

NODE_KIND = "node"
_ON_NODE = tuple(ph.value for ph in ON_NODE)

#: The heartbeat log: one registry actor of its own kind (under the ``actors`` supervisor,
#: beside the node actors), activated by ``Fleet.recover`` or the first beat.
BEATS_KIND = "heartbeats"
BEATS_ID = "all"
#: Seconds between the heartbeat log's batched writes of ``nodes.last_heartbeat``.
BEAT_FLUSH_SEC = 5.0

_BEAT_SQL = "UPDATE nodes SET last_heartbeat = ? WHERE id = ?"


# heartbeat log ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Beaten:
    """A node beat (or said hello) at wall time ``at_ms`` (unix ms)."""

    node_id: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class FlushBeats:
    """Write the pending beats now; answers how many rows were written (0 on failure)."""


@dataclass(frozen=True, slots=True)
class _FlushTick:
    """The periodic flush (sent to self)."""


@dataclass(frozen=True, slots=True)
class LatestBeats:
    """The pending (not yet written) beats: node id -> unix ms."""


BeatMsg = Beaten | FlushBeats | _FlushTick | LatestBeats


class HeartbeatLog(Actor[BeatMsg]):
    """Owns the beats not yet written: node id -> wall ms of its latest beat.

    A flush runs inside ``handle``, so nothing changes the pending map while it writes;
    beats that arrive meanwhile wait in the mailbox. A failed write keeps the pending
    beats for the next flush (newer beats replace them meanwhile).
    """

    def __init__(self, store: Store, every: float) -> None:
        self.store = store
        self.every = every
        self.pending: dict[str, int] = {}

    async def on_start(self) -> None:
        self.context.tell_after(self.every, _FlushTick())

    def can_passivate(self) -> bool:
        return False

    async def handle(self, msg: BeatMsg) -> Any:
        match msg:
            case Beaten(node_id, at_ms):
                self.pending[node_id] = at_ms
                return None
            case _FlushTick():
                await self._flush()
                self.context.tell_after(self.every, _FlushTick())
                return None
            case FlushBeats():
                return await self._flush()
            case LatestBeats():
                return dict(self.pending)

    async def on_stop(self) -> None:
        await self._flush()

    async def _flush(self) -> int:
        if not self.pending:
            return 0
        rows = [(at_ms, node_id) for node_id, at_ms in self.pending.items()]
        try:
            await self.store.execute_many(_BEAT_SQL, rows)
        except Exception:
            log.warning(
                "writing the nodes' last heartbeats failed; kept for the next flush",
                exc_info=True,
                extra={"nodes": len(rows)},
            )
            return 0
        self.pending.clear()  # handle() is not re-entered: nothing came in meanwhile
        return len(rows)


class ConnectRefused(Exception):
    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


def reputation_of(row: dict[str, Any]) -> float:
    """Laplace-smoothed share of the node's attempts that ended succeeded: (ok+1)/(total+2)."""
    return round(((row.get("attempts_ok") or 0) + 1) / ((row.get("attempts_total") or 0) + 2), 4)


class Fleet:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        registry: Registry,
        placement: ActorRef[Any],
        *,
        beat_flush_sec: float = BEAT_FLUSH_SEC,
    ) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        self.placement = placement
        self.beat_flush_sec = beat_flush_sec

    def register(self, deps: NodeDeps) -> None:
        """Register the node actors and the heartbeat log (``deps.record_beat`` is
        normally :meth:`record_beat`)."""

        async def activate(node_id: str) -> NodeActor:
            return NodeActor(deps, node_id)

        async def activate_log(_: str) -> HeartbeatLog:
            return HeartbeatLog(self.store, self.beat_flush_sec)

        self.registry.register(NODE_KIND, activate, idle_timeout=None, mailbox_capacity=1024)
        self.registry.register(BEATS_KIND, activate_log, idle_timeout=None, mailbox_capacity=4096)

    async def record_beat(self, node_id: str, at_ms: int) -> None:
        """Hand a beat to the heartbeat log: no write, and no scheduling point while its
        mailbox has room. Dropped while the server stops (the log has flushed by then)."""
        try:
            ref = await self.registry.get(BEATS_KIND, BEATS_ID)
            await ref.tell_now(Beaten(node_id, at_ms))
        except ActorError:
            pass

    async def latest_beats(self) -> dict[str, int]:
        """The beats the heartbeat log has not written yet (node id -> unix ms); empty if
        it is not running or does not answer within a second (the rows' values then)."""
        if not self.registry.active(BEATS_KIND, BEATS_ID):
            return {}
        try:
            return dict(await self.registry.ask(BEATS_KIND, BEATS_ID, LatestBeats(), timeout=1.0))
        except ActorError:
            return {}

    async def expected(self, node_id: str) -> dict[str, int]:
        rows = await self.store.fetchall(
            f"SELECT id, attempt FROM jobs WHERE node_id = ? AND phase IN "
            f"({','.join('?' * len(_ON_NODE))})",
            (node_id, *_ON_NODE),
        )
        return {r["id"]: r["attempt"] for r in rows}

    async def recover(self) -> None:
        """At start-up nobody is connected: every node is offline until its agent says hello;
        nodes that hold live jobs get an actor now so their grace clock runs."""
        await self.registry.get(BEATS_KIND, BEATS_ID)  # its flush timer runs from now
        await self.store.execute("UPDATE nodes SET status = 'offline' WHERE status <> 'offline'")
        rows = await self.store.fetchall(
            f"SELECT DISTINCT node_id FROM jobs WHERE node_id IS NOT NULL AND phase IN "
            f"({','.join('?' * len(_ON_NODE))})",
            _ON_NODE,
        )
        for row in rows:
            await self.registry.get(NODE_KIND, row["node_id"])

    async def refresh_all(self) -> None:
        """Have every connected node re-announce its shape (after a placement restart)."""
        for row in await self.store.fetchall("SELECT id FROM nodes WHERE status <> 'offline'"):
            if self.registry.active(NODE_KIND, row["id"]):
                await self.registry.tell(NODE_KIND, row["id"], Refresh())

    async def identify(self, hello: p.Hello) -> tuple[enrollment.NodeIdentity, str | None]:
        """Who is connecting: a node credential, a join token (enrolls; returns the new
        credential), or nothing in an open deploy. Raises ConnectRefused."""
        if hello.protocol != p.PROTOCOL_VERSION:
            raise ConnectRefused(
                p.CLOSE_UPGRADE_REQUIRED,
                f"agent protocol {hello.protocol} is not supported (server speaks "
                f"{p.PROTOCOL_VERSION}); upgrade the agent to runplane "
                f"{_server_version()}",
            )
        if hello.credential:
            identity = await enrollment.verify_node_credential(self.store, hello.credential)
            if identity is None:
                raise ConnectRefused(
                    p.CLOSE_UNAUTHORIZED,
                    "node credential unknown or revoked: delete the agent's credential file "
                    "and enroll again with a join token",
                )
            return identity, None
        if not self.settings.area_enabled("enrollment"):
            raise ConnectRefused(p.CLOSE_DISABLED, "enrollment is disabled on this server")
        try:
            if hello.join_token:
                node = await enrollment.enroll_node(self.store, hello.join_token)
            elif enrollment.open_enrollment_allowed(self.settings):
                node = await enrollment.open_enroll(self.store)
            else:
                raise ConnectRefused(
                    p.CLOSE_UNAUTHORIZED,
                    "this server needs a join token: mint one with POST /v1/nodes/join-tokens "
                    "and pass --join-token",
                )
        except enrollment.EnrollmentRefused as exc:
            raise ConnectRefused(p.CLOSE_UNAUTHORIZED, str(exc)) from None
        identity = enrollment.NodeIdentity(node_id=node.node_id, tier=node.tier, org_id=node.org_id)
        return identity, node.credential_secret

    async def attach(
        self, identity: enrollment.NodeIdentity, hello: p.Hello, outbox: Any
    ) -> ActorRef[Any]:
        now = now_ms()
        facts = hello.facts.model_dump()
        await self.store.execute(
            "INSERT INTO nodes (id, org_id, name, tier, facts, agent_version, channel, status,"
            " last_heartbeat, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?)"
            " ON CONFLICT (id) DO UPDATE SET name = excluded.name, facts = excluded.facts,"
            " agent_version = excluded.agent_version, channel = excluded.channel,"
            " last_heartbeat = excluded.last_heartbeat, updated_at = excluded.updated_at",
            (
                identity.node_id,
                identity.org_id,
                hello.facts.name,
                identity.tier,
                to_json(facts),
                hello.agent_version,
                hello.channel,
                "online",
                now,
                now,
                now,
            ),
        )
        ref = await self.registry.get(NODE_KIND, identity.node_id)
        await ref.ask(Attach(outbox, hello))
        return ref

    async def deliver(self, node_id: str, order: Any) -> bool:
        if not self.registry.active(NODE_KIND, node_id):
            return False
        try:
            return bool(await self.registry.ask(NODE_KIND, node_id, Deliver(order)))
        except (ActorGone, MailboxClosed):
            return False

    async def node_outcome(self, node_id: str, outcome: str) -> None:
        column = {"placed": "attempts_total", "lost": "attempts_lost", "ok": "attempts_ok"}[outcome]
        await self.store.execute(
            f"UPDATE nodes SET {column} = {column} + 1 WHERE id = ?", (node_id,)
        )

    async def views(
        self, *, after: str | None = None, limit: int | None = None, org_id: str | None = None
    ) -> list[dict[str, Any]]:
        # asked before the rows are read: a beat flushed in between is then in its row
        # (asked after, it could be in neither)
        beats = await self.latest_beats()
        sql = "SELECT * FROM nodes"
        clauses, params = [], []
        if after is not None:
            clauses.append("id > ?")
            params.append(after)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY id"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        rows = await self.store.fetchall(sql, params)
        if not rows:
            return []
        marks = ",".join("?" * len(rows))
        jobs = await self.store.fetchall(
            f"SELECT id, org_id, stack, phase, node_id, priority, spec FROM jobs WHERE node_id IN"
            f" ({marks}) AND phase IN ({','.join('?' * len(_ON_NODE))}) ORDER BY id",
            (*[r["id"] for r in rows], *_ON_NODE),
        )
        by_node: dict[str, list[dict[str, Any]]] = {}
        for job in jobs:
            by_node.setdefault(job["node_id"], []).append(job)
        return [node_view(r, by_node.get(r["id"], []), org_id, beats.get(r["id"])) for r in rows]


def node_view(
    row: dict[str, Any],
    jobs: list[dict[str, Any]],
    org_id: str | None,
    pending_beat: int | None = None,
) -> dict[str, Any]:
    """The API view of a node row; ``pending_beat`` is a beat (unix ms) the heartbeat log
    has not written yet, shown if newer than the row's."""
    facts = from_json(row["facts"])
    overrides = from_json(row["overrides"]) or {}
    gpus = facts.get("gpus", [])
    used_cpu = used_ram = used_gpu = 0.0
    running = []
    for job in jobs:
        demand = pl.demand_from_row(job)
        used_cpu += demand.cpu
        used_ram += demand.ram
        used_gpu += demand.gpus
        mine = org_id is None or job["org_id"] == org_id
        running.append(
            {
                "job_id": job["id"] if mine else "",
                "stack": job["stack"] if mine else "",
                "phase": job["phase"],
            }
        )
    cpu = facts.get("cpu_cores", 0)
    ram = facts.get("ram_gb", 0)
    last_heartbeat = row["last_heartbeat"]
    if pending_beat is not None and (last_heartbeat is None or pending_beat > last_heartbeat):
        last_heartbeat = pending_beat
    return {
        "id": row["id"],
        "name": row["name"],
        "disabled": bool(row["disabled"]),
        "tier": row["tier"],
        "status": row["status"],
        "agent_version": row["agent_version"],
        "channel": row["channel"],
        "cpu_cores": min(cpu, overrides.get("cpu_cap") or cpu),
        "ram_gb": min(ram, overrides.get("ram_cap") or ram),
        "gpus": len(gpus),
        "max_vram_gb": max((g.get("vram_gb", 0) for g in gpus), default=0),
        "gpu_models": [
            {
                "model": g.get("model", ""),
                "vendor": g.get("vendor", ""),
                "vram_gb": g.get("vram_gb", 0),
                "cuda": g.get("cuda", ""),
            }
            for g in gpus
        ],
        "arch": facts.get("arch", ""),
        "os": facts.get("os", ""),
        "max_concurrency": overrides.get("max_concurrency") or facts.get("max_concurrency", 1),
        "used_cpu": round(used_cpu),
        "used_ram": round(used_ram),
        "used_gpu": int(used_gpu),
        "running_jobs": running,
        "dlperf": facts.get("dlperf", 0.0),
        "reputation": reputation_of(row),
        "reliability": round(reliability_of(row), 4),
        "active_jobs": len(jobs),
        "last_heartbeat": iso_ms_or_none(last_heartbeat),
    }


def _server_version() -> str:
    from runplane import __version__

    return __version__
