"""The placement actor: owns the queue of waiting jobs and the fleet index, and plans.

Filter -> score -> plan happens in ``runplane/placement`` (pure); this actor keeps the
inputs current, runs a plan when something changed (coalescing bursts: at most one plan
per message batch), commits each assignment's reservation at once and hands the job to
its job actor. A job actor that refuses the assignment (cancelled meanwhile) gets its
reservation released. Waiting jobs carry the planner's human reason; when a job's reason
changes, its actor is told (without waiting: placement never blocks on a job actor), at
most once per ``REASON_EVERY`` seconds per job, and stores it as a ``phase`` event.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import assert_never

# its messages, re-exported: senders name them ``placement.Enqueue`` and so on
from runplane.actors.placement_messages import (
    Dequeue as Dequeue,
)
from runplane.actors.placement_messages import (
    Enqueue as Enqueue,
)
from runplane.actors.placement_messages import (
    FleetNow as FleetNow,
)
from runplane.actors.placement_messages import (
    GrantsChanged as GrantsChanged,
)
from runplane.actors.placement_messages import (
    Loads as Loads,
)
from runplane.actors.placement_messages import (
    NodeDown as NodeDown,
)
from runplane.actors.placement_messages import (
    NodeUp as NodeUp,
)
from runplane.actors.placement_messages import (
    PlacementMsg as PlacementMsg,
)
from runplane.actors.placement_messages import (
    PlacementStats as PlacementStats,
)
from runplane.actors.placement_messages import (
    Queued as Queued,
)
from runplane.actors.placement_messages import (
    Release as Release,
)
from runplane.actors.placement_messages import (
    Reprioritize as Reprioritize,
)
from runplane.actors.placement_messages import (
    SetWeight as SetWeight,
)
from runplane.actors.placement_messages import (
    Shares as Shares,
)
from runplane.actors.placement_messages import (
    StatsNow as StatsNow,
)
from runplane.actors.placement_messages import (
    WaitReasons as WaitReasons,
)
from runplane.actors.placement_messages import (
    _HeldOn as _HeldOn,
)
from runplane.actors.placement_messages import (
    _HoldExpired as _HoldExpired,
)
from runplane.actors.placement_messages import (
    _TellReasons as _TellReasons,
)
from runplane.jobs import repo as jobs_repo
from runplane.jobs.demand import demand_of
from runplane.jobs.jobspec import JobSpec
from runplane.jobs.phase import Phase
from runplane.jobs.rows import rank_nodes
from runplane.nodes import grants as node_grants
from runplane.nodes import repo as nodes_repo
from runplane.nodes.grants import Grant
from runplane.nodes.shape import shape_of
from runplane.persistence import Store, now_ms
from runplane.persistence.errors import store_full, store_outage
from runplane.placement import DemandError, FleetIndex, JobDemand, NodeLoad, NodeShape
from runplane.placement.fairshare import FairShare
from runplane.placement.gang import Seat, Seats, release_ranks
from runplane.placement.preempt import Hold, Holds, Preemptibles, Preemption, Running, choose
from runplane.placement.queue import JobQueue, Signature, plan_groups
from runplane.policy import repo as policy_repo
from runplane.runtime import Actor, clock

log = logging.getLogger("runplane.placement")

#: Plan at least this often (seconds) while messages keep arriving.
MAX_PLAN_DELAY = 0.05
NO_NODES = "no node is connected; start one with `runplane agent --server URL`"
#: A job's actor is told a new wait reason at most this often (seconds); a change within
#: that time is told when it is up (the latest reason), so a reason that keeps changing
#: (counts of busy nodes) costs one stored event per job per period, not one per plan.
REASON_EVERY = 5.0
#: While reasons wait to be told (held back by ``REASON_EVERY``, or not sent: a job actor
#: still activating, a full mailbox), placement looks at them again this often (seconds).
REASON_TICK = 0.25
#: At most this many waiting groups (the first in queue order) look for a preemption after
#: one plan: each look visits every node running preemptible jobs.
PREEMPT_GROUPS = 8
#: seconds past its victims' longest grace a preemption may take before placement gives
#: it up (an agent that never stops its job, one too old to know the preemption's cancel):
#: the waiting job waits again, and may preempt again
HOLD_EXTRA_SEC = 30.0
_PLACEMENT_COLUMNS = (
    f"id, priority, {jobs_repo.SPEC}, phase, node_id, org_id, retry_at, started_at, ranks, "
    "master_port"
)


@dataclass(frozen=True, slots=True)
class Handover:
    """What became of an assignment: ``taken`` by the job, or refused; a refused job that
    already holds a node names it (``on_node``)."""

    taken: bool
    on_node: str | None = None


@dataclass
class PlacementActor(Actor[PlacementMsg]):
    #: where the queue and the fleet are rebuilt from on (re)start
    store: Store
    #: hand a job to its actor
    assign: Callable[[str, str], Awaitable[Handover]]
    fleet: FleetIndex = field(default_factory=FleetIndex)
    queue: JobQueue = field(default_factory=JobQueue)
    placed: dict[str, tuple[str, JobDemand]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    #: tell a job's actor its new wait reason without waiting; False when it was not sent
    tell_reason: Callable[[str, str], bool] | None = None
    #: per job: the reason its actor was last told, and when (``clock.now()``)
    told: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: jobs whose new reason is not told yet: looked at again at ``_TellReasons``
    held: set[str] = field(default_factory=set)
    #: the live cross-org node grants, and when the first of them expires (unix ms)
    grants: tuple[Grant, ...] = ()
    grants_expire_at: int | None = None
    tell_scheduled: bool = False
    stats: PlacementStats = field(default_factory=PlacementStats)
    dirty: bool = False
    #: jobs queued (or queued again) since the last plan
    fresh: set[str] = field(default_factory=set)
    #: per fit signature, the reason its group's jobs wait (as last planned)
    verdicts: dict[Signature, str] = field(default_factory=dict)
    #: something since the last plan may let a waiting job fit or changes the order (a
    #: node up or down, a reservation released, a grant, a priority): plan the whole queue.
    #: Otherwise only ``fresh`` jobs are planned: with no capacity freed, a job that
    #: waited at the last plan still waits (loads only grew), so a submit costs one
    #: job's decision, not the queue's.
    changed: bool = True
    last_plan: float = 0.0
    #: tell a running job to stop for ``by`` within its grace (docs/placement.md
    #: "Preemption"); None: preemption is off (unit tests of the planner alone)
    preempt: Callable[[str, str, int], Awaitable[bool]] | None = None
    #: node trust tiers on which a job may preempt another org's jobs
    cross_org_tiers: tuple[str, ...] = ()
    #: the placed preemptible jobs by node, and the preemptions in flight
    running: Preemptibles = field(default_factory=Preemptibles)
    holds: Holds = field(default_factory=Holds)
    #: the last preemptible placement's time (unix ms, made strictly increasing): a victim
    #: set prefers the most recently started
    placements: int = 0
    #: the orgs' usage and weights (fair share between orgs: runplane/placement/fairshare.py)
    fair: FairShare = field(default_factory=FairShare)
    #: read the weights from the policy documents on start (False: policy disabled)
    weights_from_store: bool = True
    #: hand a placed gang to its actor: its rank nodes (rank 0 first), master port; and
    #: the placed gangs (docs/placement.md "Gangs")
    assign_gang: Callable[[str, tuple[str, ...], int], Awaitable[Handover]] | None = None
    seats: Seats = field(default_factory=Seats)

    async def on_start(self) -> None:
        """Rebuild from the store, as after a server restart: queued jobs form the queue,
        jobs on nodes hold their reservations, and every node that is not offline is in
        the fleet with that load. Messages sent meanwhile wait in the mailbox (which
        outlives a crash) and apply on top: each is idempotent against this state."""
        self._set_grants(tuple(await node_grants.live(self.store, now_ms())))
        if self.weights_from_store:
            docs = await policy_repo.load_all(self.store)
            self.fair.weights = {
                org: doc.fair_share_weight
                for org, doc in docs.items()
                if doc.fair_share_weight is not None
            }
        rows = await jobs_repo.live_columns(self.store, _PLACEMENT_COLUMNS)
        for row in rows:
            job_id, phase, spec = row["id"], Phase(row["phase"]), JobSpec.load(row["spec"])
            if phase is Phase.QUEUED and row["retry_at"] is not None:
                continue  # waiting out a retry's backoff: its actor enqueues it when due
            if phase is Phase.QUEUED:
                self._enqueue(Enqueue(job_id, row["priority"], spec, row["org_id"]))
            elif phase.on_node and row["node_id"]:
                try:
                    demand = demand_of(job_id, row["priority"], spec, row["org_id"])
                    self._placed(job_id, row["node_id"], demand, row["started_at"] or 0)
                    if row["ranks"]:  # a gang: its other ranks hold their nodes too
                        self.seats.seat(job_id, rank_nodes(row["ranks"]), row["master_port"])
                except DemandError:
                    log.warning("job on a node has an unreadable spec", extra={"job_id": job_id})
        for node_id in await nodes_repo.connected_ids(self.store):
            node = await nodes_repo.get(self.store, node_id)
            if node is not None:
                self._node_up(shape_of(node))
        self.dirty = True
        log.info(
            "placement rebuilt from the store",
            extra={"queued": len(self.queue), "placed": len(self.placed), "nodes": len(self.fleet)},
        )

    async def handle(self, msg: PlacementMsg) -> object:
        answer = self._handle(msg)
        if self.dirty and (
            self.context.ref.statistics().depth == 0
            or clock.now() - self.last_plan >= MAX_PLAN_DELAY
        ):
            self._plan()
        return answer

    def _placed(self, job_id: str, node_id: str, demand: JobDemand, started: int = 0) -> None:
        """``job_id`` holds ``demand`` on ``node_id`` (the fleet's load is the caller's)."""
        self.placed[job_id] = (node_id, demand)
        self.fair.assign(demand, clock.now())
        if demand.preemptible and demand.nodes == 1:  # a gang is never a victim
            # when it started (unix ms; rebuilt: its row's), strictly increasing as placed
            self.placements = max(self.placements + 1, started or now_ms())
            self.running.add(Running(demand, node_id, started or self.placements))

    def _enqueue(self, job: Enqueue) -> None:
        if job.job_id in self.placed or job.job_id in self.holds:  # placed meanwhile
            return
        # its actor (re)activated: it is told its reason at the next plan
        self.told.pop(job.job_id, None)
        self.fresh.add(job.job_id)
        try:
            self.queue.add(job.demand or demand_of(job.job_id, job.priority, job.spec, job.org_id))
        except DemandError as exc:  # validated at submit; a stored bad row waits
            self.reasons[job.job_id] = f"cannot be placed: {exc}"
            self._tell_reason(job.job_id, clock.now())
            return
        self.dirty = True

    def _set_grants(self, grants: tuple[Grant, ...]) -> None:
        self.grants = grants
        self.grants_expire_at = node_grants.next_expiry(grants)

    def _granted(self, shape: NodeShape) -> NodeShape:
        """``shape`` with the orgs the live grants let use it."""
        grantees = node_grants.grantees(self.grants, shape.id, shape.owner, shape.tier.label)
        return shape if grantees == shape.grantees else replace(shape, grantees=grantees)

    def _regrant(self) -> None:
        """Recompute every node's grantees (after a grant changed or expired)."""
        for shape, load in list(self.fleet):
            granted = self._granted(shape)
            if granted is not shape:
                self.fleet.upsert(granted, load)
        self.dirty = self.changed = True

    def _expire_grants(self) -> None:
        now = now_ms()
        if self.grants_expire_at is not None and now >= self.grants_expire_at:
            self._set_grants(tuple(g for g in self.grants if g.live(now)))
            self._regrant()

    def _node_up(self, shape: NodeShape) -> None:
        shape = self._granted(shape)
        load, others = NodeLoad(), self.seats.others_on(shape.id)  # a gang's other ranks
        for job_id, (node_id, demand) in self.placed.items():
            if node_id == shape.id or job_id in others:
                load = load.plus(demand.cpu, demand.ram, demand.gpus, 1, demand.org_id)
        self.fleet.upsert(shape, load)
        self.fair.set_node(shape.id, shape.cpu_cores, shape.ram_gb, shape.gpu_count)
        self.dirty = self.changed = True

    def _handle(self, msg: PlacementMsg) -> object:
        match msg:
            case Enqueue():
                self._enqueue(msg)
            case Dequeue(job_id):
                self.queue.pop(job_id)
                self._forget_reason(job_id)
                self._drop_hold(job_id)
            case _HeldOn(job_id, node_id):
                self._held_on(job_id, node_id)
            case Release(job_id):
                self._release(job_id)
            case Reprioritize(job_id, priority):
                demand = self.queue.get(job_id)
                if demand is not None:
                    self.queue.add(replace(demand, priority=priority))
                    self.dirty = self.changed = True
            case NodeUp(shape):
                self._node_up(shape)
            case NodeDown(node_id):
                for job_id in self.holds.on_node(node_id):  # waits again, elsewhere
                    hold = self._drop_hold(job_id)
                    if hold is not None:
                        self.queue.add(hold.demand)
                        self.fresh.add(job_id)
                self.fleet.remove(node_id)
                self.fair.drop_node(node_id)
                self.dirty = self.changed = True
            case GrantsChanged(grants):
                self._set_grants(grants)
                self._regrant()
            case WaitReasons(job_ids):
                return {j: self.reasons[j] for j in job_ids if j in self.reasons}
            case Loads():
                return {shape.id: self.fleet.load(shape.id) for shape, _ in self.fleet}
            case FleetNow():
                return list(self.fleet)
            case StatsNow():
                return self._stats()
            case Shares(org_id):
                return self.fair.rows(clock.now(), self.queue.orgs(), org_id)
            case SetWeight(org_id, weight):
                if weight is None:
                    self.fair.weights.pop(org_id, None)
                else:
                    self.fair.weights[org_id] = weight
                self.dirty = self.changed = True
            case Queued():
                return self.queue.as_dict()
            case _HoldExpired(job_id, hold):
                self._hold_expired(job_id, hold)
            case _TellReasons():
                self.tell_scheduled = False
                now = clock.now()
                for job_id in list(self.held):
                    self._tell_reason(job_id, now)
            case _:
                assert_never(msg)
        return None

    def _stats(self) -> PlacementStats:
        stats = replace(self.stats, queued=len(self.queue), nodes=len(self.fleet))
        stats.gangs_waiting = sum(1 for d in self.queue.values() if d.nodes > 1)
        return stats

    def _held_on(self, job_id: str, node_id: str) -> None:
        """The job refused an assignment because it holds ``node_id``: count it there."""
        demand = self.queue.pop(job_id)
        self._forget_reason(job_id)
        held = self.placed.get(job_id)
        if held is not None and held[0] == node_id:
            return
        if held is not None and held[0] in self.fleet:
            self.fleet.release(held[0], held[1])
            demand = held[1]
        if demand is not None:
            if held is not None:  # its usage moves with it
                self.fair.release(held[1], clock.now())
            self._placed(job_id, node_id, demand)
            if node_id in self.fleet:
                self.fleet.reserve(node_id, demand)
        self.dirty = self.changed = True

    def _release(self, job_id: str) -> None:
        """``job_id`` left its node (or the queue): its reservation is given back, unless
        it was a victim of a preemption in flight (then it stays counted for the waiting
        job until the last victim is gone, and is handed over with it)."""
        self.queue.pop(job_id)
        self._forget_reason(job_id)
        self._drop_hold(job_id)
        self.running.remove(job_id)
        held = self.placed.pop(job_id, None)
        if held is not None:
            self.fair.release(held[1], clock.now())
        gone = self.holds.victim_gone(held[1]) if held is not None else None
        if gone is not None:
            hold, last = gone
            if last:
                self._preempted(hold.preemption, hold.demand, hold.freed)
            return
        if held is not None and held[0] in self.fleet:
            self.fleet.release(held[0], held[1])
            self.dirty = self.changed = True
        seat = self.seats.drop(job_id)
        if seat is not None and held is not None:  # a gang: its other ranks' nodes too
            release_ranks(self.fleet, seat, held[1])
            self.dirty = self.changed = True

    def _drop_hold(self, job_id: str) -> Hold | None:
        """Give up ``job_id``'s preemption in flight, if any: what its gone victims freed
        is released (those still stopping release theirs as they go)."""
        hold = self.holds.drop(job_id)
        if hold is not None:
            self._forget_reason(job_id)
            node_id = hold.preemption.node_id
            for victim in hold.freed:
                if node_id in self.fleet:
                    self.fleet.release(node_id, victim)
            self.dirty = self.changed = True
        return hold

    def _preempted(self, preemption: Preemption, demand: JobDemand, freed: list[JobDemand]) -> None:
        """The victims are gone: their reservations become the waiting job's, at once."""
        node_id = preemption.node_id
        if node_id not in self.fleet:  # pragma: no cover - a node down drops its holds
            self.queue.add(demand)
            self.dirty = self.changed = True
            return
        for victim in freed:
            self.fleet.release(node_id, victim)
        self._forget_reason(demand.job_id)
        self.fleet.reserve(node_id, demand)
        self._placed(demand.job_id, node_id, demand)
        self.stats.assigned += 1
        self.dirty = self.changed = True  # what the victims freed beyond its needs
        self.context.start_soon(self._hand_over, demand.job_id, node_id)

    def _preempt(self, result_waiting: Iterable[Signature]) -> None:
        """After a plan: the head of each group that waits may stop lower-priority
        preemptible jobs to take their place (``runplane/placement/preempt.py``). Skipped
        outright when no such job runs (a queue without preemptible jobs pays nothing)."""
        if self.preempt is None or not self.running:
            return
        lowest = self.running.lowest_priority()
        looks = 0
        for signature in list(result_waiting):  # in queue order: highest priority first
            head = next(self.queue.group(signature), None)
            demand = self.queue.get(head) if head is not None else None
            if demand is None or lowest is None or demand.priority <= lowest:
                continue
            if demand.nodes > 1:  # a gang never preempts (docs/placement.md "Gangs")
                continue
            looks += 1
            if looks > PREEMPT_GROUPS:
                break
            found = choose(
                demand,
                self.fleet,
                self.running,
                cross_org_tiers=self.cross_org_tiers,
                busy=self.holds.victims(),
            )
            if found is not None:
                self._start_hold(found, demand)

    def _start_hold(self, preemption: Preemption, demand: JobDemand) -> None:
        self.queue.pop(demand.job_id)
        hold = self.holds.start(preemption, demand)
        self.stats.preemptions += len(preemption.victims)
        self.reasons[demand.job_id] = preemption.reason()
        self.told.pop(demand.job_id, None)  # told at once: one event per preemption
        self._tell_reason(demand.job_id, clock.now())
        log.info(
            "preempting",
            extra={
                "job_id": demand.job_id,
                "node_id": preemption.node_id,
                "victims": list(preemption.victims),
            },
        )
        assert self.preempt is not None
        longest = 1
        for victim in preemption.victims:
            grace = self.placed[victim][1].preempt_grace_sec or 1
            longest = max(longest, grace)
            self.context.start_soon(self._stop_victim, victim, demand.job_id, grace)
        self.context.tell_after(longest + HOLD_EXTRA_SEC, _HoldExpired(demand.job_id, hold))

    def _hold_expired(self, job_id: str, hold: Hold) -> None:
        """Give up a preemption whose victims did not all stop in time: the waiting job is
        queued again (what the gone victims freed is released), and may preempt again."""
        if self.holds.get(job_id) is not hold:
            return  # over (its victims are gone), or given up already
        log.warning(
            "preemption given up: victims still running",
            extra={"job_id": job_id, "node_id": hold.preemption.node_id,
                   "victims": sorted(hold.pending)},
        )  # fmt: skip
        self._drop_hold(job_id)
        self.queue.add(hold.demand)
        self.fresh.add(job_id)
        self.dirty = self.changed = True

    async def _stop_victim(self, victim: str, by: str, grace_sec: int) -> None:
        assert self.preempt is not None
        try:
            await self.preempt(victim, by, grace_sec)
        except Exception:
            log.exception("preemption order failed", extra={"job_id": victim, "by": by})

    def _forget_reason(self, job_id: str) -> None:
        self.reasons.pop(job_id, None)
        self.told.pop(job_id, None)
        self.held.discard(job_id)

    def _tell_reason(self, job_id: str, now: float) -> None:
        """Tell the job's actor its reason if it changed since the last telling: at once
        when that was ``REASON_EVERY`` seconds ago (or never), else once that time is up.
        A telling that could not be sent (the actor still activating, its mailbox full)
        is tried again ``REASON_TICK`` seconds later."""
        if self.tell_reason is None:
            return
        reason = self.reasons.get(job_id)
        last = self.told.get(job_id)
        if reason is None or (last is not None and last[0] == reason):
            self.held.discard(job_id)
        elif last is not None and now - last[1] < REASON_EVERY:
            self._hold(job_id)
        elif self.tell_reason(job_id, reason):
            self.held.discard(job_id)
            self.told[job_id] = (reason, now)
        else:
            self._hold(job_id)

    def _hold(self, job_id: str) -> None:
        self.held.add(job_id)
        if not self.tell_scheduled:
            self.tell_scheduled = True
            self.context.tell_after(REASON_TICK, _TellReasons())

    def _plan(self) -> None:
        self._expire_grants()  # an expired grant stops matching at the next tick
        self.dirty = False
        self.last_plan = clock.now()
        self.stats.queued, self.stats.nodes = len(self.queue), len(self.fleet)
        fresh, self.fresh = self.fresh, set()
        whole, self.changed = self.changed, False
        if whole:
            todo = self.queue
        else:
            todo = JobQueue(d for j in fresh if (d := self.queue.get(j)) is not None)
        if not len(todo):
            return
        if not len(self.fleet):
            for signature in list(todo.signatures()):
                self._verdict(signature, NO_NODES, fresh)
            return
        started = clock.now()
        # fair share between orgs only when several wait (one: the plain queue order)
        shares = self.fair.standing(started) if todo.org_count() > 1 else None
        result = plan_groups(todo, self.fleet, shares=shares)
        self.stats.plans += 1
        self.stats.plan_seconds += clock.now() - started
        for at, assignment in enumerate(result.assignments):
            if assignment.rank:
                continue  # placed with its rank 0
            demand = self.queue.pop(assignment.job_id)
            assert demand is not None
            self._forget_reason(assignment.job_id)
            self.fleet.reserve(assignment.node_id, demand)
            self._placed(assignment.job_id, assignment.node_id, demand)
            self.stats.assigned += 1
            if demand.nodes > 1:
                ranks = result.assignments[at : at + demand.nodes]
                self._seat(demand, tuple(a.node_id for a in ranks))
                continue
            self.context.start_soon(self._hand_over, assignment.job_id, assignment.node_id)
        self._preempt(result.waiting)  # a preemptor's reason is its preemption's
        for signature, unplaced in result.waiting.items():
            self._verdict(signature, unplaced.reason, fresh)
        for signature in [s for s in self.verdicts if not self.queue.group_size(s)]:
            del self.verdicts[signature]  # every job of the group left the queue

    def _seat(self, demand: JobDemand, nodes: tuple[str, ...]) -> None:
        """A gang placed whole: its other ranks reserve their nodes, then its hand-over."""
        for node_id in nodes[1:]:
            self.fleet.reserve(node_id, demand)
        seat = self.seats.seat(demand.job_id, nodes)
        self.stats.gangs_placed += 1
        self.context.start_soon(self._hand_over, demand.job_id, nodes[0], seat)

    def _verdict(self, signature: Signature, reason: str, fresh: set[str]) -> None:
        """The group of jobs with ``signature`` waits for ``reason``: a changed reason is
        every job's (told to each), an unchanged one only the new jobs' (the rest have it
        already). A plan thus costs per group, not per queued job, unless reasons change."""
        if self.verdicts.get(signature) != reason:
            self.verdicts[signature] = reason
            targets: Iterable[str] = list(self.queue.group(signature))
        else:
            targets = [
                j
                for j in fresh
                if (d := self.queue.get(j)) is not None and d.fit_signature == signature
            ]
        for job_id in targets:
            self.reasons[job_id] = reason
            self._tell_reason(job_id, self.last_plan)

    async def _hand_over(self, job_id: str, node_id: str, seat: Seat | None = None) -> None:
        try:
            if seat is not None and self.assign_gang is not None:  # every rank's node
                answer = await self.assign_gang(job_id, seat.nodes, seat.master_port)
            else:
                answer = await self.assign(job_id, node_id)
        except Exception as exc:
            _log_failed_assignment(exc, job_id, node_id)
            answer = Handover(taken=False)
        if answer.taken:
            return
        if answer.on_node is not None and seat is None:  # it holds another node: count it
            await self.context.ref.tell(_HeldOn(job_id, answer.on_node))
        else:
            await self.context.ref.tell(Release(job_id))


def _log_failed_assignment(exc: Exception, job_id: str, node_id: str) -> None:
    """A store outage or a full disk is no bug (the job stays queued and is planned again
    once the store answers): one warning line; anything else with its traceback."""
    cause = store_outage(exc) or store_full(exc)
    if cause is not None:
        log.warning(
            "assignment failed: the store",
            extra={"job_id": job_id, "node_id": node_id, "error": str(cause)},
        )
        return
    log.exception("assignment failed", extra={"job_id": job_id, "node_id": node_id})
