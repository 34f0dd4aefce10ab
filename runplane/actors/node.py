"""The node actor: one per connected node agent, owning the node's session and liveness.

It holds the outbox of the node's current WebSocket session, tracks heartbeats and the
job attempts sent to the node, and decides when the node is lost: no heartbeat (or no
connection) for ``grace`` seconds. A lost node's attempts go back to their job actors as
``LoseAttempt`` (requeue, attempts + 1) and the node leaves the placement fleet. A
reconnect within the grace period resumes the session: the agent lists what it still runs,
anything the server expected but the agent lacks is lost, anything the agent runs that
the server no longer wants is cancelled.

Placement places only on a node that can take a run order now: a node whose session ends
(``disconnected``) leaves the placement fleet at once, while its attempts wait out the
grace period; a run order that cannot be handed to the session also takes the node out
(its job goes back to the queue, uncounted: ``Undelivered``). The next sign of life (a
new session, or a beat of this one) puts it back.

Draining: an agent that stops gracefully says ``draining`` first. The node leaves the
placement fleet at once (status ``draining``; the session stays, and a run order is not
delivered), its running attempts may still finish and report, and each attempt it hands
back (``job_released``) goes back to its job actor as ``LoseAttempt`` with the reason
:func:`drained_reason`: the node-loss requeue (attempts + 1), not a cancel. When a
draining node's session ends with nothing left on it, the node is ``offline`` at once.

Heartbeats: liveness reads ``last_seen`` (the trio clock) only, kept here. The wall time
of the last beat (``nodes.last_heartbeat``) is not written per beat: it goes to
``NodeDeps.record_beat``, the heartbeat log (``runplane/actors/heartbeats.py``), which
writes all nodes' latest beats in one batch every few seconds. A status change
(online, draining, disconnected, offline) still writes at once, with the last beat.

Image cache: a container node's hello reports its cached image digests with its facts,
and a heartbeat carries them again only when they changed (a pull, an eviction); the
actor writes a changed cache into the row's facts and re-announces the node to placement
(``image_cached`` weight, docs/containers.md "Placement").

Self-update (``runplane/nodes/update.py``): at each hello the actor hands the agent an
operator's pending request (``update``, requested), else, for an agent that said
``auto_update``, its channel's target when it differs; ``OfferUpdate`` does the same at
once for a connected node (an operator's request, or a channel target just moved); the
agent's ``update_status`` reports are written to the row.

Reliability: the row's attempt counters (placed, lost, ok) are this actor's to write
(``CountAttempt``, from the job actors' transitions via ``Fleet.node_outcome``). A node
with no live actor (lost, drained, or not connected since the start) is counted by the
fleet service with the same write (``nodes_repo.count_outcome``), so no count is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import assert_never

import trio

from runplane.agent import protocol as p
from runplane.nodes import repo as nodes_repo
from runplane.nodes import update
from runplane.nodes.shape import shape_of
from runplane.nodes.status import AttemptOutcome, NodeStatus
from runplane.persistence import Store
from runplane.placement import NodeShape
from runplane.runtime import Actor, ActorKind, Asks, clock

log = logging.getLogger("runplane.nodes")


# messages -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Attach(Asks[None]):
    outbox: trio.MemorySendChannel[str]
    hello: p.Hello


@dataclass(frozen=True, slots=True)
class Detach:
    outbox: trio.MemorySendChannel[str]


@dataclass(frozen=True, slots=True)
class Beat:
    running: tuple[tuple[str, int], ...]
    #: the node's image cache, when it changed since its last report (a container node)
    images: p.ImageFacts | None = None


@dataclass(frozen=True, slots=True)
class Deliver(Asks[bool]):
    """Hand ``msg`` to the node's agent: True when it went to a live session."""

    msg: p.Run | p.Cancel | p.FinishedAck | p.Teleop


@dataclass(frozen=True, slots=True)
class AttemptEnded:
    job_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class Drain:
    """The agent of session ``outbox`` is draining (``draining`` message)."""

    outbox: trio.MemorySendChannel[str]
    deadline_sec: float


@dataclass(frozen=True, slots=True)
class Released(Asks["str | None"]):
    """The draining agent stopped ``attempt`` of ``job_id`` (``job_released``). Answers the
    requeue reason when the attempt was this node's (the caller hands it to the job actor
    and waits for it, so the requeue is stored before the agent's session can end), else
    None. The node actor never asks a job actor itself: a job may be asking it."""

    job_id: str
    attempt: int


@dataclass(frozen=True, slots=True)
class OfferUpdate(Asks[bool]):
    """Send the connected agent ``update`` to ``version`` (True when it went out).
    ``channel`` set: a channel target moved; only an auto-updating agent of that channel
    on another version gets it. ``channel`` None: an operator's request, always sent."""

    version: str
    channel: str | None = None


@dataclass(frozen=True, slots=True)
class UpdateReported:
    """The agent's ``update_status``."""

    version: str
    phase: str
    error: str | None


@dataclass(frozen=True, slots=True)
class CountAttempt:
    """One more attempt placed on, lost with, or finished ok by this node: the row's
    reliability counters (``attempts_total``, ``attempts_lost``, ``attempts_ok``), written
    at once. Sent by the job actors through ``Fleet.node_outcome``."""

    outcome: AttemptOutcome


@dataclass(frozen=True, slots=True)
class Tick:
    """Periodic liveness check (sent to self)."""


@dataclass(frozen=True, slots=True)
class Refresh:
    """Node row changed (patch, overrides): re-announce the shape to placement."""


NodeMsg = (
    Attach
    | Detach
    | Beat
    | Deliver
    | AttemptEnded
    | CountAttempt
    | Drain
    | Released
    | Tick
    | Refresh
    | OfferUpdate
    | UpdateReported
)


def drained_reason(node_id: str) -> str:
    """Why an attempt handed back by a draining agent was requeued (the job's ``error``
    while it is queued again)."""
    return f"node {node_id} shut down (agent drained; requeued)"


#: The node actors, one per connected (or recently lost) node, addressed by node id.
NODES = ActorKind[NodeMsg]("node")


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
    #: the target version of a release channel (None: no target set)
    channel_target: Callable[[str], Awaitable[str | None]] = lambda _: _no_target()
    #: extra seconds a node rebuilt without its session (at start-up, at an HA takeover)
    #: has to say hello before the grace clock runs: its agent may be waiting out its
    #: reconnect backoff, or still talking to a paused old leader
    #: (``runplane.system.RECONNECT_GRACE_SEC``, docs/jobs.md "Restart")
    reconnect_grace: float = 0.0


async def _no_target() -> str | None:
    return None


class NodeActor(Actor[NodeMsg]):
    def __init__(
        self, deps: NodeDeps, node_id: str, *, session: trio.MemorySendChannel[str] | None = None
    ) -> None:
        self.deps = deps
        self.node_id = node_id
        #: the outbox of the node's WebSocket session; a restart after a crash resumes it
        self.outbox: trio.MemorySendChannel[str] | None = session
        self.last_seen = clock.now()  # liveness (monotonic): the grace clock reads this
        self.last_beat_ms: int | None = None  # wall time of the last hello or beat
        self.attempts: dict[str, int] = {}
        self.lost = False
        #: the agent of the current session said ``draining``: out of placement
        self.draining = False
        #: out of placement because it cannot take run orders now (disconnected, or a run
        #: order could not be handed to its session): back in at its next sign of life
        self.unready = False
        #: the current session's hello (its version, channel and auto-update)
        self.hello: p.Hello | None = None
        #: the image cache last stored (from the hello, then heartbeats): a report equal
        #: to it is not written again
        self.images: p.ImageFacts | None = None

    async def on_start(self) -> None:
        """Rebuild from the store: the attempts the jobs table puts on this node. A node
        actor restarted while its agent is connected resumes the session it was given and
        re-announces the node's capacity to placement (an upsert: no double count)."""
        self.attempts = await self.deps.expected(self.node_id)
        self.last_seen = clock.now() + (self.deps.reconnect_grace if self.outbox is None else 0.0)
        if self.outbox is not None:
            row = await nodes_repo.get(self.deps.store, self.node_id)
            self.draining = row is not None and row.status == NodeStatus.DRAINING
            if row is not None and not self.draining:
                await self.deps.node_up(shape_of(row))
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

    async def handle(self, msg: NodeMsg) -> object:
        match msg:
            case Attach(outbox, hello):
                await self._attach(outbox, hello)
                return None
            case Detach(outbox):
                await self._detach(outbox)
                return None
            case Beat(images=images):
                if images is not None:
                    await self._images(images)
                await self._beat()
                return None
            case Deliver(order):
                return await self._deliver_order(order)
            case Drain(outbox, deadline_sec):
                if outbox is self.outbox and not self.draining:
                    await self._drain(deadline_sec)
                return None
            case Released(job_id, attempt):
                return self._released(job_id, attempt)
            case AttemptEnded(job_id, attempt):
                if self.attempts.get(job_id) == attempt:
                    del self.attempts[job_id]
                return None
            case CountAttempt(outcome):
                await nodes_repo.count_outcome(self.deps.store, self.node_id, outcome)
                return None
            case Tick():
                await self._check()
                return None
            case Refresh():
                if self.outbox is not None and not self.draining:
                    await self._announce()
                return None
            case OfferUpdate(version, channel):
                return self._offer(version, channel)
            case UpdateReported():
                await self._update_reported(msg)
                return None
            case _:
                assert_never(msg)

    async def _detach(self, outbox: trio.MemorySendChannel[str]) -> None:
        if outbox is not self.outbox:
            return  # a replaced session ended
        self.outbox = None
        if self.draining and not self.attempts:
            await self._drained()
            return
        log.info("node disconnected", extra={"node_id": self.node_id})
        # status first: a placement rebuilding meanwhile leaves it out
        await self._set_status(NodeStatus.DISCONNECTED)
        await self._unready()

    async def _beat(self) -> None:
        self.last_seen = clock.now()
        self.last_beat_ms = wall_ms()
        await self.deps.record_beat(self.node_id, self.last_beat_ms)
        if self.unready and self.outbox is not None and not self.draining:
            await self._announce()  # it takes orders again

    async def _images(self, images: p.ImageFacts) -> None:
        """A new image cache (the agent reports one only when it changed): stored in the
        row's facts (placement rebuilds from them) and announced to placement, whose
        ``image_cached`` weight reads it. An unchanged report writes nothing."""
        if images == self.images:
            return
        self.images = images
        await nodes_repo.set_images(self.deps.store, self.node_id, images.model_dump())
        if self.outbox is not None and not self.draining and not self.unready:
            await self._announce()

    async def _deliver_order(self, order: p.Run | p.Cancel | p.FinishedAck | p.Teleop) -> bool:
        if self.draining and isinstance(order, p.Run):
            log.info(
                "run order not delivered: the node is draining",
                extra={"node_id": self.node_id, "job_id": order.job_id},
            )
            return False  # the job actor requeues it
        delivered = self._deliver(order)
        if not delivered and isinstance(order, p.Run):
            await self._unready()
        return delivered

    async def _update_reported(self, report: UpdateReported) -> None:
        log.log(
            logging.WARNING if report.phase == "failed" else logging.INFO,
            "agent self-update",
            extra={
                "node_id": self.node_id,
                "version": report.version,
                "phase": report.phase,
                "error": report.error,
            },
        )
        await nodes_repo.record_update_status(
            self.deps.store, self.node_id, report.version, report.phase, report.error
        )

    def _offer(self, version: str, channel: str | None) -> bool:
        hello = self.hello
        if hello is None or self.outbox is None or version == hello.agent_version:
            return False
        if channel is not None and (channel != hello.channel or not hello.auto_update):
            return False
        return self._deliver(p.Update(version=version, requested=channel is None))

    async def _offer_on_hello(self, hello: p.Hello, requested: str) -> None:
        """An operator's pending request (``requested``, from the row) first; else the
        channel target, if the agent applies targets by itself."""
        if update.still_pending(requested, hello.agent_version):
            self._offer(requested, None)
            return
        if requested:  # this agent fulfils it
            await nodes_repo.clear_update_request(self.deps.store, self.node_id, requested)
        if hello.auto_update:
            target = await self.deps.channel_target(hello.channel)
            if target:
                self._offer(target, hello.channel)

    def _deliver(self, order: p.Run | p.Cancel | p.FinishedAck | p.Teleop | p.Update) -> bool:
        """Hand ``order`` to the session; a run order's attempt is this node's only once
        it went out (one that did not is requeued by its job actor, uncounted)."""
        if self.outbox is None:
            return False
        try:
            self.outbox.send_nowait(p.encode(order))
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            return False
        if isinstance(order, p.Run):
            self.attempts[order.job_id] = order.attempt
        return True

    async def _unready(self) -> None:
        """Out of placement until the agent shows life again (a new session, or a beat of
        this one): it cannot take run orders now (disconnected, or its session would not
        take one). Its attempts stay: the grace clock decides whether they are lost."""
        if not self.unready:
            self.unready = True
            await self.deps.node_down(self.node_id)

    async def _attach(self, outbox: trio.MemorySendChannel[str], hello: p.Hello) -> None:
        if self.outbox is not None and self.outbox is not outbox:
            self.outbox.close()  # the old session is stale: its writer ends and closes it
        self.outbox = outbox
        self.hello = hello
        self.images = hello.facts.images  # the hello wrote them with its facts
        self.draining = False  # a new session: its agent says again if it still drains
        self.unready = False  # announced below
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
        await self._set_status(NodeStatus.ONLINE)
        row = await self._announce()
        if row is not None:
            await self._offer_on_hello(hello, row.update.target)
        log.info(
            "node attached",
            extra={"node_id": self.node_id, "resumed": sorted(self.attempts)},
        )

    async def _drain(self, deadline_sec: float) -> None:
        """Out of placement (status first: a placement rebuilding meanwhile leaves it out),
        the session kept: running attempts still report."""
        self.draining = True
        log.info(
            "node draining",
            extra={
                "node_id": self.node_id,
                "deadline_sec": deadline_sec,
                "jobs": sorted(self.attempts),
            },
        )
        await self._set_status(NodeStatus.DRAINING)
        await self.deps.node_down(self.node_id)

    def _released(self, job_id: str, attempt: int) -> str | None:
        """An attempt handed back by the draining agent: the reason it is requeued with, as
        after a node loss. Only an attempt the server has on this node (an agent cannot
        release others): None for any other."""
        fields = {"node_id": self.node_id, "job_id": job_id, "attempt": attempt}
        if self.attempts.get(job_id) != attempt:
            log.warning("job_released of an attempt not on this node ignored", extra=fields)
            return None
        del self.attempts[job_id]
        log.info("attempt handed back by the draining agent", extra=fields)
        return drained_reason(self.node_id)

    async def _drained(self) -> None:
        """The draining agent went away with nothing left here: offline now, not after
        the grace period (a reconnect activates a new node actor)."""
        log.info("node drained and gone", extra={"node_id": self.node_id})
        self.lost = True
        await self._set_status(NodeStatus.OFFLINE)
        self.context.stop()

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
        # offline in the store first: a placement rebuilding meanwhile leaves it out, or
        # has it removed by the NodeDown that follows
        await self._set_status(NodeStatus.OFFLINE)
        await self.deps.node_down(self.node_id)
        for job_id, attempt in list(self.attempts.items()):
            await self.deps.lose_attempt(job_id, attempt, reason)
        self.attempts.clear()
        self.context.stop()

    async def _announce(self) -> nodes_repo.NodeRow | None:
        """Tell placement the node's shape (facts and overrides from its row, returned)."""
        row = await nodes_repo.get(self.deps.store, self.node_id)
        if row is not None:
            self.unready = False
            await self.deps.node_up(shape_of(row))
        return row

    async def _set_status(self, status: NodeStatus) -> None:
        """Written at once (not batched), with the last beat: after a crash the row says
        when a disconnected or lost node was last heard from (a node activated at
        start-up and never attached keeps the row's beat)."""
        await nodes_repo.set_status(self.deps.store, self.node_id, status, self.last_beat_ms)


def wall_ms() -> int:
    """Wall-clock unix ms of a heartbeat, from the runtime's clock (tests pin it)."""
    return int(clock.wall() * 1000)
