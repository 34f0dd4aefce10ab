"""The running system: the root of the actor tree (the supervisor every long-lived actor
hangs under) and the services wired to it. The composition root: it imports actors and
services, and nothing below imports it (only ``http`` and ``cli`` do).

    root (one-for-one, 5 restarts / 10 s)
    ├── channels        ChannelTargets: operator release-channel map
    ├── admission       AdmissionActor: policy documents + quota ledger (the one gate)
    ├── placement       PlacementActor: queue + fleet index, plans assignments
    ├── sampler         NodeSampler: every node's committed load, one batch per 30 s
    ├── webhooks        WebhookDispatcher: pending deliveries, attempts and retries
    ├── scheduler       Scheduler: fires due schedules (started last, once services run)
    └── actors          supervisor of the registry's virtual actors
        ├── job/<id>    JobActor, one per live job (terminal ones passivate)
        ├── pipeline/<id>  PipelineActor, one per live pipeline run (finished ones passivate)
        ├── session/<id>   SessionActor, one per live session (its reaper's timer)
        ├── node/<id>   NodeActor, one per connected (or recently lost) node
        ├── heartbeats/all  HeartbeatLog: nodes' last beats, written in batches
        └── keepalives/all  KeepaliveLog: sessions' last keepalives, written in batches

If the root gives up (restart intensity exceeded) the error reaches the app's nursery and
the server stops: the process supervisor (systemd, k8s) restarts it, and every actor
rebuilds its state from the store.
"""

from __future__ import annotations

from contextlib import suppress
from typing import Any, cast

import trio

from runplane.actors import placement as pl
from runplane.actors.admission import AdmissionActor, AdmissionMsg, follow_jobs
from runplane.actors.channels import ChannelMsg, ChannelTargets, get_targets
from runplane.actors.janitor import Janitor, JanitorMsg, SweepNow, Swept
from runplane.actors.job_deps import JobDeps, StreamSetup
from runplane.actors.job_messages import JOBS, Assign, LoseAttempt, Preempt, WaitReason
from runplane.actors.node import NodeDeps
from runplane.actors.sampler import NodeSampler
from runplane.actors.scheduler import Scheduler, SchedulerDeps, SchedulerMsg
from runplane.actors.webhooks import DispatchDeps, DispatchMsg, WebhookDispatcher
from runplane.artifacts import ArtifactStore
from runplane.jobs import counts
from runplane.jobs.transitions import Transitions
from runplane.nodes import grants as node_grants
from runplane.nodes import repo as nodes_repo
from runplane.nodes.metrics import SAMPLE_SEC
from runplane.persistence import Store, now_ms
from runplane.placement import NodeLoad, NodeShape
from runplane.placement.fairshare import FairShare
from runplane.policy import platform_caps
from runplane.runtime import ActorRef, ChildSpec, Hub, Registry, Supervisor
from runplane.sealing import Sealer
from runplane.services.accounts import Accounts
from runplane.services.fleet import Fleet
from runplane.services.git import Git
from runplane.services.images import Images
from runplane.services.job_arrays import JobArrays
from runplane.services.job_links import FleetLink, PlacementQueue
from runplane.services.jobs import Jobs
from runplane.services.pipelines import Pipelines
from runplane.services.records import JobRecords
from runplane.services.schedules import Schedules
from runplane.services.sessions import Sessions
from runplane.services.shares import FairShares
from runplane.services.streams import Streams
from runplane.services.webhooks import Webhooks
from runplane.settings import Settings
from runplane.stacks import Catalog
from runplane.streams.acks import TeleopAcks

#: Seconds between agent heartbeats, and how many may be missed before a node is lost.
HEARTBEAT_SEC = 5.0
MISSED_HEARTBEATS = 3
#: How much longer than its grace a node rebuilt without its session (at start-up, at an HA
#: takeover) has to say hello: after a server restart its agent may be waiting out its
#: reconnect backoff (at most 30 s, runplane/agent/backoff.py), and at a takeover an agent
#: still connected to a paused old leader notices only by its ping's timeout (at most 2
#: beats of interval + 3 of timeout, 25 s). Without it a restart longer than a few seconds
#: would requeue, and so run twice, the jobs still running on every backing-off node
#: (docs/jobs.md "Restart", docs/operations.md).
RECONNECT_GRACE_SEC = 30.0


class Root:
    def __init__(
        self,
        settings: Settings,
        store: Store,
        catalog: Catalog,
        *,
        heartbeat_sec: float = HEARTBEAT_SEC,
        reconnect_grace_sec: float = RECONNECT_GRACE_SEC,
        node_sample_sec: float = SAMPLE_SEC,
        artifacts: ArtifactStore | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.reconnect_grace_sec = reconnect_grace_sec
        #: the artifact store the retention janitor deletes expired artifacts from
        self.artifacts = artifacts
        self.heartbeat_sec = heartbeat_sec
        self.hub = Hub()
        #: teleop frames waiting for their agent's confirmation (runplane/streams/acks.py)
        self.teleop_acks = TeleopAcks()
        self.actors = Supervisor(name="actors", intensity=1000, period=1.0)
        self.registry = Registry(self.actors)
        self.supervisor = Supervisor(
            self._children(node_sample_sec), intensity=5, period=10.0, name="root"
        )
        self.fleet = Fleet(settings, store, self.registry)
        self._sealer: Sealer | None = None  # made by sealer() once the key is loaded
        #: git connections (runplane/services/git.py)
        self.git = Git(store, settings, self.sealer)
        #: image resolution and registry credentials (runplane/services/images.py)
        self.images = Images(store, settings, self.sealer)
        #: outgoing webhooks (runplane/services/webhooks.py); its dispatcher is a child above
        self.webhooks = Webhooks(store, settings, lambda: self.dispatcher, self.sealer)
        self._catalog = catalog
        self._jobs: Jobs | None = None
        self._pipelines: Pipelines | None = None
        self._sessions: Sessions | None = None
        self._schedules: Schedules | None = None
        #: the streams service (runplane/services/streams.py): asks the job actors
        self.streams = Streams(store, self.hub, self.registry, catalog, settings, self.teleop_acks)
        #: what routes read of stored jobs, and people, orgs, credentials, secrets
        #: (runplane/services/records.py, accounts.py): routes never reach the store
        self.records = JobRecords(store)
        self.accounts = Accounts(store, settings, self.sealer)
        #: fair share between orgs (runplane/services/shares.py): asks placement
        self.shares = FairShares(lambda: self.placement, settings.fair_share_half_life_sec)

    def _children(self, node_sample_sec: float) -> list[ChildSpec[Any]]:
        """The root's children (the scheduler is started last, by ``run``)."""
        store, settings = self.store, self.settings
        return [
            ChildSpec("channels", lambda: ChannelTargets(store)),
            ChildSpec(
                "admission",
                lambda: AdmissionActor(
                    store, platform_caps(settings), use_docs=settings.area_enabled("policy")
                ),
                mailbox_capacity=4096,
            ),
            ChildSpec(
                "placement",
                lambda: pl.PlacementActor(
                    store=store,
                    assign=self._assign,
                    assign_gang=self._assign_gang,
                    tell_reason=self._tell_reason,
                    preempt=self._preempt,
                    cross_org_tiers=settings.cross_org_preemption_tiers,
                    fair=FairShare(half_life=settings.fair_share_half_life_sec),
                    weights_from_store=settings.area_enabled("policy"),
                ),
                mailbox_capacity=4096,
            ),
            ChildSpec("sampler", lambda: NodeSampler(store, self._fleet_now, node_sample_sec)),
            ChildSpec(
                "janitor",
                lambda: Janitor(
                    store,
                    self.artifacts,
                    settings.retention_days,
                    period=settings.retention_sweep_sec,
                ),
            ),
            ChildSpec(
                "webhooks",
                lambda: WebhookDispatcher(
                    DispatchDeps(
                        store,
                        self.webhooks.sealer,
                        self.webhooks.allow,
                        enabled=self.webhooks.enabled,
                    )
                ),
                mailbox_capacity=4096,
            ),
            ChildSpec("actors", lambda: self.actors),
        ]

    async def _assign(self, job_id: str, node_id: str) -> pl.Handover:
        answer = await self.registry.ask(JOBS, job_id, Assign(node_id))
        return pl.Handover(answer.taken, answer.on_node)

    async def _assign_gang(
        self, job_id: str, nodes: tuple[str, ...], master_port: int
    ) -> pl.Handover:
        answer = await self.registry.ask(JOBS, job_id, Assign(nodes[0], nodes, master_port))
        return pl.Handover(answer.taken, answer.on_node)

    async def _preempt(self, job_id: str, by: str, grace_sec: int) -> bool:
        answer: bool = await self.registry.ask(JOBS, job_id, Preempt(by, grace_sec))
        return answer

    async def _fleet_now(self) -> list[tuple[NodeShape, NodeLoad]]:
        return await self.placement.try_ask(pl.FleetNow())

    def _tell_reason(self, job_id: str, reason: str) -> bool:
        # from placement's handler, for many jobs at once: never waits, never activates.
        # A passivated queued job is told nothing (True: placement answers its reason to
        # the views, and its next activation enqueues it again, which re-tells); one
        # activating or with a full mailbox is tried again (False).
        if self.registry.tell_active(JOBS, job_id, WaitReason(reason)):
            return True
        return not self.registry.present(JOBS, job_id)

    async def run(self, *, task_status: trio.TaskStatus[Any] = trio.TASK_STATUS_IGNORED) -> None:
        # nobody is connected yet: every node is offline until its agent says hello (the
        # placement actor reads the fleet from these rows as it starts)
        await nodes_repo.mark_all_offline(self.store)
        await counts.backfill(self.store)  # the analytics rollup of a deploy that had none
        async with trio.open_nursery() as nursery:
            await nursery.start(self.supervisor.run)
            self._wire()
            await self.fleet.recover()
            await self.jobs.recover()
            await self.pipelines.recover()
            await self.sessions.recover()
            await self.webhooks.recover()
            if self.settings.area_enabled("schedules"):
                # last: its first fires go through the services wired above
                await self.supervisor.start_child(
                    ChildSpec(
                        "scheduler",
                        lambda: Scheduler(SchedulerDeps(self.store, self.schedules.fire)),
                        mailbox_capacity=4096,
                    )
                )
            task_status.started()

    def _wire(self) -> None:
        registry = self.registry
        self._jobs = jobs = Jobs(
            self.store,
            self._catalog,
            registry,
            self.placement,
            self.admission,
            self.hub,
            self.sealer,
        )
        jobs.resolve_git = self.git.resolve_mounts
        jobs.resolve_image = self.images.resolve
        jobs.preempt_grace_sec = self.settings.preempt_grace_sec
        self._pipelines = pipelines = Pipelines(self.store, jobs, registry)
        self._sessions = sessions = Sessions(
            self.store, jobs, registry, self._catalog, self.settings
        )
        sessions.resolve_image = self.images.container
        self._schedules = Schedules(self.store, jobs, pipelines, self._scheduler_ref)
        # Who follows a job's transitions (runplane/jobs/transitions.py), in this order:
        # the admission ledger first (a slot is free before the transition's effects give
        # placement the capacity back), the run's webhook deliveries and commit status
        # (queued in the transition's transaction), its pipeline, its session.
        transitions = Transitions()
        follow_jobs(self.admission, transitions)
        self.webhooks.follow(transitions)
        self.git.follow(transitions, self.webhooks.poke)
        pipelines.register(transitions)
        sessions.register(transitions)
        streams = StreamSetup(
            self._stream_kinds, self.settings.stream_ring, self.teleop_acks, self.streams.counters
        )
        jobs.register(
            JobDeps(
                self.store,
                self.hub,
                node=FleetLink(self.store, self.fleet, self.git, self.sealer, self.images),
                placement=PlacementQueue(self.placement, self.fleet),
                streams=streams,
                transitions=transitions,
            )
        )
        self.fleet.register(self._node_deps())

    def _node_deps(self) -> NodeDeps:
        """What the node actors talk to: placement (a node up or down), the job actors (an
        attempt lost), the fleet's beats and expectations, the release channels."""
        placement, registry = self.placement, self.registry

        async def node_up(shape: NodeShape) -> None:
            await placement.tell(pl.NodeUp(shape))

        async def node_down(node_id: str) -> None:
            await placement.tell(pl.NodeDown(node_id))

        async def lose_attempt(job_id: str, attempt: int, reason: str) -> None:
            await registry.tell(JOBS, job_id, LoseAttempt(attempt, reason))

        return NodeDeps(
            store=self.store,
            grace=self.heartbeat_sec * MISSED_HEARTBEATS,
            reconnect_grace=self.reconnect_grace_sec,
            node_up=node_up,
            node_down=node_down,
            lose_attempt=lose_attempt,
            expected=self.fleet.expected,
            record_beat=self.fleet.record_beat,
            channel_target=self._channel_target,
        )

    def _scheduler_ref(self) -> ActorRef[SchedulerMsg] | None:
        if not self.settings.area_enabled("schedules"):
            return None
        try:
            return cast(ActorRef[SchedulerMsg], self.supervisor.child("scheduler"))
        except LookupError:
            return None  # not started yet: it reads every schedule when it starts

    @property
    def schedules(self) -> Schedules:
        """The schedules service (once the tree runs)."""
        if self._schedules is None:
            raise RuntimeError("the actor tree is not running yet")
        return self._schedules

    def sealer(self) -> Sealer:
        """Seals secrets at rest with the server's key (loaded at start-up)."""
        if self._sealer is None:
            self._sealer = Sealer(self.settings.secret_key_bytes())
        return self._sealer

    async def _channel_target(self, channel: str) -> str | None:
        return (await get_targets(self.channels)).get(channel)

    def _stream_kinds(self, stack: str) -> dict[str, str]:
        """The streams a stack declares, by name: their kinds."""
        found = self._catalog.get(stack)
        return {s.name: s.kind for s in found.streams} if found is not None else {}

    @property
    def jobs(self) -> Jobs:
        """The jobs service (once the tree runs)."""
        if self._jobs is None:
            raise RuntimeError("the actor tree is not running yet")
        return self._jobs

    @property
    def arrays(self) -> JobArrays:
        """The job arrays service (once the tree runs)."""
        return JobArrays(self.jobs)

    @property
    def pipelines(self) -> Pipelines:
        """The pipelines service (once the tree runs)."""
        if self._pipelines is None:
            raise RuntimeError("the actor tree is not running yet")
        return self._pipelines

    async def grants_changed(self) -> None:
        """A node grant was made or revoked: placement recomputes each node's grantees."""
        live = await node_grants.live(self.store, now_ms())
        await self.placement.tell(pl.GrantsChanged(tuple(live)))

    @property
    def sessions(self) -> Sessions:
        """The sessions service (once the tree runs)."""
        if self._sessions is None:
            raise RuntimeError("the actor tree is not running yet")
        return self._sessions

    async def stop(self) -> None:
        await self.supervisor.stop()

    @property
    def channels(self) -> ActorRef[ChannelMsg]:
        return cast(ActorRef[ChannelMsg], self.supervisor.child("channels"))

    def mailboxes(self) -> dict[str, tuple[int, int]]:
        """Per actor kind (registry kinds and the root's singletons): live actors and the
        messages queued in their mailboxes now (/metrics)."""
        out = self.registry.mailboxes()
        for name in self.supervisor.children():
            with suppress(KeyError):  # it ended meanwhile
                ref = self.supervisor.child(name)
                if isinstance(ref, ActorRef):  # not the registry's own supervisor
                    out[str(name)] = (1, ref.statistics().depth)
        return out

    @property
    def admission(self) -> ActorRef[AdmissionMsg]:
        return cast(ActorRef[AdmissionMsg], self.supervisor.child("admission"))

    @property
    def janitor(self) -> ActorRef[JanitorMsg]:
        return cast(ActorRef[JanitorMsg], self.supervisor.child("janitor"))

    async def sweep_now(self) -> Swept:
        """Run a retention sweep now (operators and tests): what it deleted."""
        return await self.janitor.ask(SweepNow(), timeout=None)

    @property
    def dispatcher(self) -> ActorRef[DispatchMsg]:
        return cast(ActorRef[DispatchMsg], self.supervisor.child("webhooks"))

    @property
    def placement(self) -> ActorRef[pl.PlacementMsg]:
        return cast(ActorRef[pl.PlacementMsg], self.supervisor.child("placement"))
