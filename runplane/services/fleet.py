"""The fleet service: what routes and the agent WebSocket call about nodes.

It registers the node actors and the heartbeat log (``runplane/actors/heartbeats.py``),
keeps each connected node's session (the outbox of its WebSocket) so a restarted node
actor resumes it, attaches agents on hello, delivers orders to node actors and renders
node views (``runplane/nodes/view.py``) with the beats not yet written.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import trio

from runplane.actors.heartbeats import (
    BEAT_FLUSH_SEC,
    Beaten,
    BeatMsg,
    HeartbeatLog,
    LatestBeats,
)
from runplane.actors.node import (
    NODES,
    Attach,
    CountAttempt,
    Deliver,
    Detach,
    NodeActor,
    NodeDeps,
    NodeMsg,
    OfferUpdate,
    Refresh,
)
from runplane.agent import protocol as p
from runplane.jobs import repo as jobs_repo
from runplane.nodes import enrollment, grants, metrics, patch, update
from runplane.nodes import repo as nodes_repo
from runplane.nodes.connect import identify
from runplane.nodes.enrollment import NodeIdentity
from runplane.nodes.status import AttemptOutcome
from runplane.nodes.view import node_view
from runplane.persistence import Store, now_ms
from runplane.problems import not_found
from runplane.runtime import ActorError, ActorGone, ActorKind, ActorRef, MailboxClosed, Registry
from runplane.settings import Settings

log = logging.getLogger("runplane.nodes")

#: The heartbeat log: one registry actor of its own kind (under the ``actors`` supervisor,
#: beside the node actors), activated by ``Fleet.recover`` or the first beat.
HEARTBEATS = ActorKind[BeatMsg]("heartbeats")
BEATS_ID = "all"

Outbox = trio.MemorySendChannel[str]


class Fleet:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        registry: Registry,
        *,
        beat_flush_sec: float = BEAT_FLUSH_SEC,
    ) -> None:
        self.settings = settings
        self.store = store
        self.registry = registry
        self.beat_flush_sec = beat_flush_sec
        #: node id -> the outbox of its current WebSocket session: a node actor restarted
        #: after a crash picks its session up from here (the socket outlives the actor)
        self.sessions: dict[str, Outbox] = {}
        #: node id -> how other nodes reach it (its ``--advertise-address``, else the
        #: address its WebSocket came from): a gang's ``RUNPLANE_MASTER_ADDR``
        self.addresses: dict[str, str] = {}

    def register(self, deps: NodeDeps) -> None:
        """Register the node actors and the heartbeat log (``deps.record_beat`` is
        normally :meth:`record_beat`)."""

        async def activate(node_id: str) -> NodeActor:
            return NodeActor(deps, node_id, session=self.sessions.get(node_id))

        async def activate_log(_: str) -> HeartbeatLog:
            return HeartbeatLog(self.store, self.beat_flush_sec)

        self.registry.register(NODES, activate, idle_timeout=None, mailbox_capacity=1024)
        self.registry.register(HEARTBEATS, activate_log, idle_timeout=None, mailbox_capacity=4096)

    async def record_beat(self, node_id: str, at_ms: int) -> None:
        """Hand a beat to the heartbeat log: no write, and no scheduling point while its
        mailbox has room. Dropped while the server stops (the log has flushed by then)."""
        try:
            ref = await self.registry.get(HEARTBEATS, BEATS_ID)
            await ref.tell_now(Beaten(node_id, at_ms))
        except ActorError:
            pass

    async def latest_beats(self) -> dict[str, int]:
        """The beats the heartbeat log has not written yet (node id -> unix ms); empty if
        it is not running or does not answer within a second (the rows' values then)."""
        if not self.registry.active(HEARTBEATS, BEATS_ID):
            return {}
        try:
            return await self.registry.ask(HEARTBEATS, BEATS_ID, LatestBeats(), timeout=1.0)
        except ActorError:
            return {}

    async def expected(self, node_id: str) -> dict[str, int]:
        return await nodes_repo.expected_attempts(self.store, node_id)

    async def recover(self) -> None:
        """At start-up (after ``nodes_repo.mark_all_offline``: nobody is connected yet),
        nodes that hold live jobs get an actor now so their grace clock runs."""
        await self.registry.get(HEARTBEATS, BEATS_ID)  # its flush timer runs from now
        for node_id in await nodes_repo.nodes_with_live_jobs(self.store):
            await self.registry.get(NODES, node_id)

    async def identify(self, hello: p.Hello) -> tuple[NodeIdentity, str | None]:
        """Who is connecting (``runplane/nodes/connect.py``); raises ConnectRefused."""
        return await identify(self.settings, self.store, hello)

    async def attach(
        self,
        identity: NodeIdentity,
        hello: p.Hello,
        outbox: Outbox,
        seen_from: str | None = None,
    ) -> ActorRef[NodeMsg]:
        await nodes_repo.upsert_attached(
            self.store,
            nodes_repo.Attached(
                node_id=identity.node_id,
                org_id=identity.org_id,
                tier=identity.tier,
                name=hello.facts.name,
                facts=hello.facts.model_dump(),
                agent_version=hello.agent_version,
                channel=hello.channel,
                auto_update=hello.auto_update,
            ),
        )
        self.sessions[identity.node_id] = outbox
        if seen_from is not None or hello.facts.advertise_address:
            self.addresses[identity.node_id] = hello.facts.advertise_address or seen_from or ""
        ref = await self.registry.get(NODES, identity.node_id)
        await ref.ask(Attach(outbox, hello))
        return ref

    async def detach(self, node: ActorRef[NodeMsg], node_id: str, outbox: Outbox) -> None:
        """The session of ``outbox`` ended (the agent went away, or was replaced)."""
        if self.sessions.get(node_id) is outbox:
            del self.sessions[node_id]
        with contextlib.suppress(ActorGone, MailboxClosed):
            await node.tell(Detach(outbox))

    async def deliver(self, node_id: str, order: p.Run | p.Cancel | p.Teleop) -> bool:
        if not self.registry.active(NODES, node_id):
            return False
        try:
            return await self.registry.ask(NODES, node_id, Deliver(order))
        except (ActorGone, MailboxClosed):
            return False

    async def refresh(self, node_id: str) -> None:
        """The node's row changed (a PATCH): its actor re-announces its shape to placement
        (a node not connected is announced when its agent next says hello)."""
        if self.registry.active(NODES, node_id):
            with contextlib.suppress(ActorGone, MailboxClosed):
                await self.registry.tell(NODES, node_id, Refresh())

    async def _offer(self, node_id: str, msg: OfferUpdate) -> bool:
        if node_id not in self.sessions or not self.registry.active(NODES, node_id):
            return False
        try:
            return await self.registry.ask(NODES, node_id, msg)
        except (ActorGone, MailboxClosed):
            return False

    async def request_update(
        self, node_id: str, targets: dict[str, str]
    ) -> tuple[dict[str, Any], int]:
        """``POST /v1/nodes/{id}/update``: the NodeUpdateResult and its status: 200 when the
        node is connected and got the signal (or needs none), 202 when it gets it at its
        next hello. The request is stored before it is sent, so an offline node (or one
        whose session could not take it now) still gets it."""
        row = await nodes_repo.get(self.store, node_id)
        if row is None:
            raise not_found("node")
        target = targets.get(row.channel)
        connected = node_id in self.sessions
        sent = False
        if target is not None and target != row.agent_version:
            await nodes_repo.request_update(self.store, node_id, target)
            sent = await self._offer(node_id, OfferUpdate(target))
        elif target is not None:  # nothing to do: an older request is void
            await nodes_repo.request_update(self.store, node_id, "")
        body = update.result(
            node_id,
            row.agent_version,
            row.channel,
            target,
            row.update,
            connected=connected,
            sent=sent,
        )
        due = target is not None and target != row.agent_version
        return body, 200 if connected and (sent or not due) else 202

    async def announce_target(self, channel: str, version: str) -> int:
        """A channel's target moved: offer it to the connected agents of that channel that
        apply targets by themselves (how many got it)."""
        offered = 0
        for node_id in list(self.sessions):
            offered += await self._offer(node_id, OfferUpdate(version, channel))
        if offered:
            log.info(
                "channel target offered to auto-updating agents",
                extra={"channel": channel, "version": version, "nodes": offered},
            )
        return offered

    async def node_outcome(self, node_id: str, outcome: AttemptOutcome) -> None:
        """Count an attempt's outcome on its node: by the node's actor (the owner of its
        row's counters), without waiting on it (a job actor sends this from its handler);
        a node with no live actor (lost, drained, never connected since the start), or
        one whose mailbox is full, is counted here with the same write."""
        if not self.registry.tell_active(NODES, node_id, CountAttempt(outcome)):
            await nodes_repo.count_outcome(self.store, node_id, outcome)

    async def views(
        self, *, after: str | None = None, limit: int | None = None, org_id: str | None = None
    ) -> list[dict[str, Any]]:
        # asked before the rows are read: a beat flushed in between is then in its row
        # (asked after, it could be in neither)
        beats = await self.latest_beats()
        rows = await nodes_repo.page(self.store, after=after, limit=limit)
        jobs = await nodes_repo.jobs_on(self.store, [r.id for r in rows])
        return [node_view(r, jobs.get(r.id, []), org_id, beats.get(r.id)) for r in rows]

    async def view_page(self, cursor: str | None, limit: int, org_id: str | None) -> dict[str, Any]:
        """One keyset page of node views after ``cursor`` (None: the first):
        ``{items, next_cursor, has_more}``."""
        after = jobs_repo.decode_cursor(cursor) if cursor else None
        views = await self.views(after=after, limit=limit + 1, org_id=org_id)
        has_more = len(views) > limit
        views = views[:limit]
        return {
            "items": views,
            "next_cursor": jobs_repo.encode_cursor(views[-1]["id"]) if has_more else "",
            "has_more": has_more,
        }

    # the nodes' rows, for routes ----------------------------------------------------------

    async def patch_node(
        self, node_id: str, body: patch.NodePatch, org_id: str | None
    ) -> dict[str, Any]:
        """``PATCH /v1/nodes/{id}`` (``runplane/nodes/patch.py``); the node's actor
        re-announces its shape to placement."""
        result = await patch.apply(self.store, node_id, body, org_id=org_id)
        await self.refresh(node_id)
        return result

    async def node_metrics(self, node_id: str, window: str) -> dict[str, Any]:
        """The node's sampled load over ``window`` (``runplane/nodes/metrics.py``)."""
        return await metrics.metrics(self.store, node_id, window, now_ms())

    async def grant(
        self, body: grants.GrantBody, *, caller_org: str, superuser: bool, created_by: str
    ) -> grants.Grant:
        """A new node grant (``runplane/nodes/grants.py``); placement is told by the caller
        (``Root.grants_changed``)."""
        return await grants.create(
            self.store, body, caller_org=caller_org, superuser=superuser, created_by=created_by
        )

    async def grant_list(self, org_id: str | None) -> dict[str, list[dict[str, Any]]]:
        return await grants.listing(self.store, org_id)

    async def revoke_grant(self, grant_id: str, org_id: str | None) -> grants.Grant:
        return await grants.revoke(self.store, grant_id, org_id)

    async def mint_join_token(
        self, *, tier: str, org_id: str, label: str
    ) -> tuple[enrollment.JoinTokenView, str]:
        return await enrollment.mint_join_token(self.store, tier=tier, org_id=org_id, label=label)

    async def join_tokens(self, org_id: str | None) -> list[enrollment.JoinTokenView]:
        return await enrollment.list_join_tokens(self.store, org_id)

    async def revoke_join_token(self, token_id: str) -> bool:
        return await enrollment.revoke_join_token(self.store, token_id)
