"""The placement actor's messages (``runplane/actors/placement.py``), and what two of
them answer: the actor's counters (:class:`PlacementStats`)."""

from __future__ import annotations

from dataclasses import dataclass

from runplane.jobs.jobspec import JobSpec
from runplane.jobs.rows import JobRow
from runplane.nodes.grants import Grant
from runplane.placement import JobDemand, NodeLoad, NodeShape
from runplane.placement.fairshare import ShareRow
from runplane.placement.preempt import Hold
from runplane.runtime import Asks

# messages -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Enqueue:
    """Queue the job (again): what placement reads of its row."""

    job_id: str
    priority: int
    spec: JobSpec
    org_id: str | None = None
    #: its demand when the sender has it already (a submit checked it): not made again
    demand: JobDemand | None = None

    @classmethod
    def of(cls, row: JobRow, demand: JobDemand | None = None) -> Enqueue:
        return cls(row.id, row.priority, row.spec, row.org_id, demand)


@dataclass(frozen=True, slots=True)
class Dequeue:
    job_id: str


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
class GrantsChanged:
    """The live node grants now (after a grant or a revocation): each node's grantees are
    recomputed before the next plan."""

    grants: tuple[Grant, ...]


@dataclass(frozen=True, slots=True)
class WaitReasons(Asks[dict[str, str]]):
    """The wait reason of each of ``job_ids`` that is queued here."""

    job_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Loads(Asks[dict[str, NodeLoad]]):
    pass


@dataclass(frozen=True, slots=True)
class FleetNow(Asks[list[tuple[NodeShape, NodeLoad]]]):
    """Every node in the fleet with its committed load (the node sampler's round)."""


@dataclass(frozen=True, slots=True)
class StatsNow(Asks["PlacementStats"]):
    """A copy of placement's counters (plans, their seconds, queue depth): /metrics."""


@dataclass(frozen=True, slots=True)
class Shares(Asks[list[ShareRow]]):
    """Each org's fair-share standing now (``GET /v1/analytics/share``, /metrics); with
    ``org_id``, that org's alone."""

    org_id: str | None = None


@dataclass(frozen=True, slots=True)
class SetWeight:
    """An org's fair-share weight changed (its policy document; None: the default)."""

    org_id: str
    weight: float | None


@dataclass(frozen=True, slots=True)
class Queued(Asks[dict[str, JobDemand]]):
    """The queue as it is now (job id -> demand): for tests and operators."""


@dataclass(frozen=True, slots=True)
class _HoldExpired:
    """A preemption's time is up (sent to self): give ``hold`` up if still in flight."""

    job_id: str
    hold: Hold


@dataclass(frozen=True, slots=True)
class _TellReasons:
    """Time to look at the reasons not told yet (sent to self)."""


@dataclass(frozen=True, slots=True)
class _HeldOn:
    """An assignment refused because the job already holds ``node_id`` (sent to self)."""

    job_id: str
    node_id: str


PlacementMsg = (
    Enqueue
    | Dequeue
    | Release
    | Reprioritize
    | NodeUp
    | NodeDown
    | GrantsChanged
    | WaitReasons
    | Loads
    | FleetNow
    | StatsNow
    | Shares
    | SetWeight
    | Queued
    | _HeldOn
    | _HoldExpired
    | _TellReasons
)


@dataclass(slots=True)
class PlacementStats:
    plans: int = 0
    assigned: int = 0
    plan_seconds: float = 0.0
    queued: int = 0
    nodes: int = 0
    #: running jobs told to stop for a waiting one (runplane_preemptions_total)
    preemptions: int = 0
    #: gangs placed (all ranks at once), gangs queued now (runplane_gangs_*)
    gangs_placed: int = 0
    gangs_waiting: int = 0
