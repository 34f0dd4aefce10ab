"""The placement actor: owns the queue of waiting jobs and the fleet index, and plans.

Filter -> score -> plan happens in ``runplane/placement`` (pure); this actor keeps the
inputs current, runs a plan when something changed (coalescing bursts: at most one plan
per message batch), commits each assignment's reservation at once and hands the job to
its job actor. A job actor that refuses the assignment (cancelled meanwhile) gets its
reservation released. Waiting jobs carry the planner's human reason.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from runplane.persistence import from_json
from runplane.placement import DemandError, Fleet, JobDemand, NodeLoad, NodeShape, plan
from runplane.runtime import Actor, clock

log = logging.getLogger("runplane.placement")

#: Plan at least this often (seconds) while messages keep arriving.
MAX_PLAN_DELAY = 0.05
NO_NODES = "no node is connected; start one with `runplane agent --server URL`"


def demand_from_row(row: dict[str, Any]) -> JobDemand:
    spec = from_json(row["spec"]) if isinstance(row["spec"], str) else row["spec"]
    return JobDemand.from_spec(
        job_id=row["id"],
        priority=row["priority"],
        created_at=row["id"],  # ids sort by creation time
        limits=spec.get("limits") or {},
        requires=spec.get("requires") or {},
        weights=spec.get("weights") or {},
        weights_preset=spec.get("weights_preset"),
    )


# messages -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Enqueue:
    row: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Dequeue:
    job_id: str


@dataclass(frozen=True, slots=True)
class Restore:
    """A job already on a node (server restart): count its reservation."""

    row: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Release:
    job_id: str


@dataclass(frozen=True, slots=True)
class Reprioritize:
    job_id: str
    priority: int


@dataclass(frozen=True, slots=True)
class NodeUp:
    shape: NodeShape


@dataclass(frozen=True, slots=True)
class NodeDown:
    node_id: str


@dataclass(frozen=True, slots=True)
class WaitReasons:
    job_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Loads:
    pass


PlacementMsg = (
    Enqueue | Dequeue | Restore | Release | Reprioritize | NodeUp | NodeDown | WaitReasons | Loads
)


@dataclass(slots=True)
class PlacementStats:
    plans: int = 0
    assigned: int = 0
    plan_seconds: float = 0.0
    queued: int = 0
    nodes: int = 0


@dataclass
class PlacementActor(Actor[PlacementMsg]):
    #: hand a job to its actor: True if it took the assignment
    assign: Callable[[str, str], Awaitable[bool]]
    fleet: Fleet = field(default_factory=Fleet)
    queue: dict[str, JobDemand] = field(default_factory=dict)
    placed: dict[str, tuple[str, JobDemand]] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    stats: PlacementStats = field(default_factory=PlacementStats)
    dirty: bool = False
    last_plan: float = 0.0
    #: set on a restart: refill the queue and fleet from the store and the node actors
    rebuild: Callable[[], Awaitable[None]] | None = None

    async def on_start(self) -> None:
        if self.rebuild is not None:
            self.context.start_soon(self.rebuild)

    async def handle(self, msg: PlacementMsg) -> Any:
        answer = self._handle(msg)
        if self.dirty and (
            self.context.ref.statistics().depth == 0
            or clock.now() - self.last_plan >= MAX_PLAN_DELAY
        ):
            self._plan()
        return answer

    def _handle(self, msg: PlacementMsg) -> Any:
        match msg:
            case Enqueue(row):
                try:
                    self.queue[row["id"]] = demand_from_row(row)
                except DemandError as exc:  # validated at submit; a stored bad row waits
                    self.reasons[row["id"]] = f"cannot be placed: {exc}"
                    return None
                self.dirty = True
            case Dequeue(job_id):
                self.queue.pop(job_id, None)
                self.reasons.pop(job_id, None)
            case Restore(row):
                demand = demand_from_row(row)
                self.placed[row["id"]] = (row["node_id"], demand)
                if row["node_id"] in self.fleet:
                    self.fleet.reserve(row["node_id"], demand)
            case Release(job_id):
                self.queue.pop(job_id, None)
                self.reasons.pop(job_id, None)
                held = self.placed.pop(job_id, None)
                if held is not None and held[0] in self.fleet:
                    self.fleet.release(held[0], held[1])
                    self.dirty = True
            case Reprioritize(job_id, priority):
                demand = self.queue.get(job_id)
                if demand is not None:
                    self.queue[job_id] = replace(demand, priority=priority)
                    self.dirty = True
            case NodeUp(shape):
                load = NodeLoad()
                for node_id, demand in self.placed.values():
                    if node_id == shape.id:
                        load = load.plus(demand.cpu, demand.ram, demand.gpus)
                self.fleet.upsert(shape, load)
                self.dirty = True
            case NodeDown(node_id):
                self.fleet.remove(node_id)
                self.dirty = True
            case WaitReasons(job_ids):
                return {j: self.reasons[j] for j in job_ids if j in self.reasons}
            case Loads():
                return {node_id: self.fleet.load(node_id) for node_id, _ in _ids(self.fleet)}
        return None

    def _plan(self) -> None:
        self.dirty = False
        self.last_plan = clock.now()
        self.stats.queued, self.stats.nodes = len(self.queue), len(self.fleet)
        if not self.queue:
            return
        if not len(self.fleet):
            self.reasons.update(dict.fromkeys(self.queue, NO_NODES))
            return
        started = clock.now()
        result = plan(self.queue.values(), self.fleet)
        self.stats.plans += 1
        self.stats.plan_seconds += clock.now() - started
        for job_id, unplaced in result.waiting.items():
            self.reasons[job_id] = unplaced.reason
        for assignment in result.assignments:
            demand = self.queue.pop(assignment.job_id)
            self.reasons.pop(assignment.job_id, None)
            self.fleet.reserve(assignment.node_id, demand)
            self.placed[assignment.job_id] = (assignment.node_id, demand)
            self.stats.assigned += 1
            self.context.start_soon(self._hand_over, assignment.job_id, assignment.node_id)

    async def _hand_over(self, job_id: str, node_id: str) -> None:
        try:
            taken = await self.assign(job_id, node_id)
        except Exception:
            log.exception("assignment failed", extra={"job_id": job_id, "node_id": node_id})
            taken = False
        if not taken:
            await self.context.ref.tell(Release(job_id))


def _ids(fleet: Fleet) -> list[tuple[str, NodeShape]]:
    return [(shape.id, shape) for shape, _ in fleet]
