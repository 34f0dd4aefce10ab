"""Weighted fair share between orgs: the order in which orgs' waiting jobs are planned.

Each org's *usage* is its dominant-resource share (DRF: the largest of its allocated CPU,
RAM and GPUs over the fleet's capacity of each) integrated over time with exponential
decay (half-life ``RUNPLANE_FAIR_SHARE_HALF_LIFE_SEC``), plus its current dominant share
charged for :data:`START_CHARGE_SEC`: a job counts the moment it is assigned (so one
plan alternates between orgs, and a burst of short jobs is seen), and keeps counting in
the history after it ends. An org's *fair-share key* is its usage over its weight
(``fair_share_weight`` in its policy document, default 1): the org with the lowest key
that has a placeable head goes next, and its key grows with each assignment.

Pure: :class:`FairShare` keeps the state (the placement actor feeds it assignments,
releases, nodes and the clock); :class:`Standing` is one plan's working copy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from .model import JobDemand

#: Seconds of its current dominant share an org is charged on top of its history.
START_CHARGE_SEC = 1.0
#: The default half-life (seconds) of the usage history.
DEFAULT_HALF_LIFE_SEC = 600.0
DEFAULT_WEIGHT = 1.0
RESOURCES = ("cpu", "ram", "gpu")

Org = str | None
Vector = tuple[float, float, float]  # cpu cores, ram GB, gpus


def dominant(used: Vector, capacity: Vector) -> tuple[float, str]:
    """The largest share of ``used`` over ``capacity`` and its resource (a resource the
    fleet has none of counts for nothing); ``(0.0, "cpu")`` for no usage."""
    best, name = 0.0, RESOURCES[0]
    for amount, total, resource in zip(used, capacity, RESOURCES, strict=True):
        if total > 0 and amount / total > best:
            best, name = amount / total, resource
    return best, name


def _plus(a: Vector, b: Vector, sign: float = 1.0) -> Vector:
    return (
        max(0.0, a[0] + sign * b[0]),
        max(0.0, a[1] + sign * b[1]),
        max(0.0, a[2] + sign * b[2]),
    )


def demand_vector(job: JobDemand) -> Vector:
    """What ``job`` holds while it runs: a gang, every rank's."""
    n = job.nodes
    return (job.cpu * n, job.ram * n, float(job.gpus * n))


@dataclass(slots=True)
class OrgUsage:
    """One org's allocation now and its decayed history (share-seconds)."""

    used: Vector = (0.0, 0.0, 0.0)
    jobs: int = 0
    history: float = 0.0


@dataclass(frozen=True, slots=True)
class ShareRow:
    """One org's standing (``GET /v1/analytics/share``, ``/metrics``)."""

    org_id: str
    weight: float
    share: float
    dominant_resource: str
    usage: float
    key: float
    running: Vector
    running_jobs: int
    waiting_jobs: int


@dataclass(slots=True)
class FairShare:
    """The orgs' usage, the fleet's capacity and the weights, advanced on the clock."""

    half_life: float = DEFAULT_HALF_LIFE_SEC
    weights: dict[str, float] = field(default_factory=dict)
    orgs: dict[Org, OrgUsage] = field(default_factory=dict)
    nodes: dict[str, Vector] = field(default_factory=dict)
    capacity: Vector = (0.0, 0.0, 0.0)
    at: float | None = None

    def advance(self, now: float) -> None:
        """Integrate every org's dominant share from the last call to ``now``."""
        if self.at is not None and now > self.at and self.orgs:
            tau = self.half_life / math.log(2)
            keep = math.exp(-(now - self.at) / tau)
            for usage in self.orgs.values():
                share = dominant(usage.used, self.capacity)[0]
                usage.history = usage.history * keep + share * tau * (1.0 - keep)
        if self.at is None or now > self.at:
            self.at = now
        self._forget_idle()

    def _forget_idle(self) -> None:
        """Drop orgs with nothing running whose history decayed to nothing."""
        idle = [o for o, u in self.orgs.items() if not u.jobs and u.history < 1e-9]
        for org in idle:
            del self.orgs[org]

    def set_node(self, node_id: str, cpu: float, ram: float, gpus: int) -> None:
        """A node joined or changed: the capacity shares are computed against from now (the
        history since the last change is integrated at the next one, against the new
        capacity: nodes come and go rarely against assignments and releases)."""
        vector = (cpu, ram, float(gpus))
        old = self.nodes.get(node_id)
        if old != vector:
            self.nodes[node_id] = vector
            self.capacity = _plus(
                self.capacity if old is None else _plus(self.capacity, old, -1.0), vector
            )

    def drop_node(self, node_id: str) -> None:
        old = self.nodes.pop(node_id, None)
        if old is not None:
            self.capacity = _plus(self.capacity, old, -1.0) if self.nodes else (0.0, 0.0, 0.0)

    def assign(self, job: JobDemand, now: float) -> None:
        self.advance(now)
        usage = self.orgs.setdefault(job.org_id, OrgUsage())
        usage.used = _plus(usage.used, demand_vector(job))
        usage.jobs += 1

    def release(self, job: JobDemand, now: float) -> None:
        self.advance(now)
        usage = self.orgs.get(job.org_id)
        if usage is not None:
            usage.used = _plus(usage.used, demand_vector(job), -1.0)
            usage.jobs = max(0, usage.jobs - 1)
            if not usage.jobs:
                usage.used = (0.0, 0.0, 0.0)

    def weight(self, org: Org) -> float:
        return self.weights.get(org, DEFAULT_WEIGHT) if org is not None else DEFAULT_WEIGHT

    def standing(self, now: float) -> Standing:
        """A plan's working copy of every org's usage and weight."""
        self.advance(now)
        out = Standing(self.capacity)
        for org, usage in self.orgs.items():
            out.set(org, history=usage.history, used=usage.used, weight=self.weight(org))
        for org, weight in self.weights.items():
            if org not in self.orgs:
                out.set(org, weight=weight)
        return out

    def rows(self, now: float, waiting: dict[Org, int], only: str | None = None) -> list[ShareRow]:
        """Every org running or waiting (or with history), lowest key first; ``only``:
        that org's row alone (zeros when it has none of these)."""
        self.advance(now)
        out = []
        for org in {*self.orgs, *waiting} if only is None else {only}:
            if org is None:
                continue
            usage = self.orgs.get(org, OrgUsage())
            share, resource = dominant(usage.used, self.capacity)
            weight = self.weight(org)
            total = usage.history + START_CHARGE_SEC * share
            row = ShareRow(org, weight, share, resource, total, total / weight, usage.used,
                           usage.jobs, waiting.get(org, 0))  # fmt: skip
            out.append(row)
        return sorted(out, key=lambda r: (r.key, r.org_id))


@dataclass(slots=True)
class _Entry:
    history: float
    used: Vector
    weight: float


class Standing:
    """One plan's view of the orgs' usage: :meth:`key` orders them, :meth:`take` charges
    an org for a job the plan assigned (the actor's :class:`FairShare` is not changed)."""

    __slots__ = ("_capacity", "_orgs")

    def __init__(self, capacity: Vector) -> None:
        self._capacity = capacity
        self._orgs: dict[Org, _Entry] = {}

    def set(
        self,
        org: Org,
        *,
        history: float = 0.0,
        used: Vector = (0.0, 0.0, 0.0),
        weight: float = DEFAULT_WEIGHT,
    ) -> Standing:
        """Set an org's figures (the actor's copy; tests)."""
        self._orgs[org] = _Entry(history, used, weight)
        return self

    def key(self, org: Org) -> float:
        """The org's usage over its weight: lower goes first."""
        entry = self._orgs.get(org)
        if entry is None:
            return 0.0
        share = dominant(entry.used, self._capacity)[0]
        return (entry.history + START_CHARGE_SEC * share) / entry.weight

    def take(self, org: Org, job: JobDemand) -> None:
        entry = self._orgs.get(org)
        if entry is None:
            entry = self._orgs[org] = _Entry(0.0, (0.0, 0.0, 0.0), DEFAULT_WEIGHT)
        entry.used = _plus(entry.used, demand_vector(job))

    def copy(self) -> Standing:
        out = Standing(self._capacity)
        for org, e in self._orgs.items():
            out._orgs[org] = _Entry(e.history, e.used, e.weight)
        return out
