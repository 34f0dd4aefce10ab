"""Preemption, pure: which running jobs to stop so that a waiting job fits, and the holds
that keep what they free for it (docs/placement.md "Preemption").

A waiting job ``J`` may preempt a running job ``V`` when ``V`` is preemptible, of lower
priority than ``J``, of ``J``'s org (or on a node whose trust tier the operator opened to
cross-org preemption: ``RUNPLANE_CROSS_ORG_PREEMPTION_TIERS``), and not already being
preempted for another job. On each node holding such jobs, :func:`choose` looks for the
smallest set of them whose reservations, taken off the node's load, let ``J`` pass every
filter; between sets and nodes it prefers fewest jobs, then the lowest priorities (the
highest victim priority first, then the next), then the most recently started (as Nomad
and Kubernetes do), then the lowest node id. One victim is found by a walk of the
preemptible jobs in that order (exact); several, on the first :data:`MULTI_NODES` nodes
that could take the job, where a node with up to :data:`EXACT_UP_TO` candidates is
searched exhaustively and one with more greedily (dropped in preference order, then pruned
of jobs the set does not need).

:class:`Holds` keeps the preemptions in flight: the victims' reservations stay counted on
the node until the last of them is gone, then they are released and the waiting job's
reservation is made at once, so no other job takes what was freed for it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import combinations

from sortedcontainers import SortedList

from .filters import first_rejection
from .index import FleetIndex
from .model import JobDemand, NodeLoad, NodeShape

#: A node with more candidate victims than this is searched greedily, not exhaustively.
EXACT_UP_TO = 12


@dataclass(frozen=True, slots=True)
class Running:
    """A preemptible job holding a reservation on ``node_id``; ``started``: when it was
    placed (any increasing number: a larger one started more recently)."""

    demand: JobDemand
    node_id: str
    started: int

    @property
    def job_id(self) -> str:
        return self.demand.job_id


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop ``victims`` on ``node_id`` so that ``job_id`` runs there; the grace is the
    longest of the victims' (what the waiting job waits at most, beyond their exit)."""

    job_id: str
    node_id: str
    victims: tuple[str, ...]
    grace_sec: int

    def reason(self) -> str:
        """The preemptor's wait reason while the victims stop."""
        names = ", ".join(self.victims)
        return f"preempting {names} on node {self.node_id} (grace {self.grace_sec} s)"


class Preemptibles:
    """The running preemptible jobs, by node and in preference order (lowest priority,
    then most recently started, then node and job id): what :func:`choose` searches."""

    __slots__ = ("_by_node", "_node_of", "_order")

    def __init__(self) -> None:
        self._by_node: dict[str, dict[str, Running]] = {}
        self._node_of: dict[str, Running] = {}
        self._order: SortedList[tuple[int, int, str, str]] = SortedList()

    def __bool__(self) -> bool:
        return bool(self._node_of)

    def __len__(self) -> int:
        return len(self._node_of)

    def add(self, running: Running) -> None:
        self.remove(running.job_id)
        self._by_node.setdefault(running.node_id, {})[running.job_id] = running
        self._node_of[running.job_id] = running
        self._order.add(_order_key(running))

    def remove(self, job_id: str) -> None:
        running = self._node_of.pop(job_id, None)
        if running is None:
            return
        jobs = self._by_node[running.node_id]
        del jobs[job_id]
        if not jobs:
            del self._by_node[running.node_id]
        self._order.remove(_order_key(running))

    def lowest_priority(self) -> int | None:
        """The lowest priority among them (a job at or below it cannot preempt any)."""
        return self._order[0][0] if self._order else None

    def in_order(self) -> Iterator[Running]:
        """Every one of them, the preferred victim first."""
        for key in self._order:
            yield self._node_of[key[3]]

    def nodes(self) -> Iterator[tuple[str, Iterable[Running]]]:
        for node_id, jobs in self._by_node.items():
            yield node_id, jobs.values()


def _order_key(running: Running) -> tuple[int, int, str, str]:
    return (running.demand.priority, -running.started, running.node_id, running.job_id)


def may_preempt(
    job: JobDemand, victim: JobDemand, node: NodeShape, cross_org_tiers: Iterable[str]
) -> bool:
    """Whether ``job`` may stop ``victim`` on ``node`` (the policy, not the fit)."""
    if not victim.preemptible or victim.priority >= job.priority:
        return False
    return victim.org_id == job.org_id or node.tier.label in cross_org_tiers


SetKey = tuple[int, tuple[int, ...], tuple[int, ...]]


def set_key(victims: Iterable[Running]) -> SetKey:
    """The preference between victim sets: smaller first, then lower priorities (compared
    highest first), then more recently started."""
    chosen = list(victims)
    priorities = tuple(sorted((r.demand.priority for r in chosen), reverse=True))
    recency = tuple(sorted(-r.started for r in chosen))
    return (len(chosen), priorities, recency)


def _without(load: NodeLoad, victims: Iterable[Running]) -> NodeLoad:
    for victim in victims:
        d = victim.demand
        load = load.plus(-d.cpu, -d.ram, -d.gpus, -1, d.org_id)
    return load


def _fits(node: NodeShape, load: NodeLoad, job: JobDemand, victims: Iterable[Running]) -> bool:
    return first_rejection(node, _without(load, victims), job) is None


def victims_on(
    job: JobDemand, node: NodeShape, load: NodeLoad, candidates: list[Running]
) -> tuple[Running, ...] | None:
    """The preferred set of ``candidates`` whose going lets ``job`` fit on ``node``, or
    None when even all of them going would not."""
    if not candidates or not _fits(node, load, job, candidates):
        return None
    ordered = sorted(candidates, key=lambda r: (r.demand.priority, -r.started, r.job_id))
    if len(ordered) > EXACT_UP_TO:
        return _greedy(job, node, load, ordered)
    for size in range(1, len(ordered) + 1):
        fitting = [c for c in combinations(ordered, size) if _fits(node, load, job, c)]
        if fitting:
            return min(fitting, key=set_key)
    return None  # pragma: no cover - all of them fit (checked above)


def _greedy(
    job: JobDemand, node: NodeShape, load: NodeLoad, ordered: list[Running]
) -> tuple[Running, ...]:
    chosen: list[Running] = []
    for victim in ordered:
        chosen.append(victim)
        if _fits(node, load, job, chosen):
            break
    for victim in sorted(chosen, key=lambda r: (-r.demand.priority, r.started)):
        rest = [c for c in chosen if c is not victim]
        if _fits(node, load, job, rest):
            chosen = rest
    return tuple(chosen)


def choose(
    job: JobDemand,
    fleet: FleetIndex,
    running: Preemptibles,
    *,
    cross_org_tiers: Iterable[str] = (),
    busy: Iterable[str] = (),
) -> Preemption | None:
    """Where ``job`` runs if some running jobs are stopped for it, and which (None: no
    node frees enough with jobs it may preempt). ``busy``: jobs already being preempted
    (one preemption in flight per victim).

    One victim is enough for most jobs: the running jobs are walked in preference order
    and the first whose going lets ``job`` fit is the answer (exact: no set is smaller, and
    none of one job is preferred). Otherwise each node that could fit it once all its
    candidates went (a cheap count first, then the filters) is searched exactly, at most
    :data:`MULTI_NODES` of them, taken in the order of their preferred candidate."""
    search = _Search(job, fleet, set(busy), tuple(cross_org_tiers))
    one = search.one_victim(running)
    if one is not None:
        return search.preemption(one[0], one[1])
    best: tuple[SetKey, str, tuple[Running, ...]] | None = None
    for node_id in search.multi_nodes(running):
        found = victims_on(job, fleet.node(node_id), fleet.load(node_id), search.seen[node_id])
        if found is not None and (best is None or (set_key(found), node_id) < best[:2]):
            best = (set_key(found), node_id, found)
    return None if best is None else search.preemption(best[1], best[2])


#: Most nodes :func:`choose` searches for a set of several victims (the first that could
#: fit, by their preferred candidate): bounds a decision on a large full fleet.
MULTI_NODES = 32


class _Search:
    """One :func:`choose`: which nodes could ever take the job (per node, once), and the
    candidates seen on each."""

    def __init__(
        self, job: JobDemand, fleet: FleetIndex, busy: set[str], tiers: tuple[str, ...]
    ) -> None:
        self.job, self.fleet, self.busy, self.tiers = job, fleet, busy, tiers
        self.static: dict[str, bool] = {}
        self.seen: dict[str, list[Running]] = {}

    def candidate(self, victim: Running) -> NodeShape | None:
        """``victim``'s node when ``job`` may stop it there (the policy: the fit is
        :meth:`takes`'s)."""
        node_id = victim.node_id
        if victim.job_id in self.busy or node_id not in self.fleet:
            return None
        node = self.fleet.node(node_id)
        return node if may_preempt(self.job, victim.demand, node, self.tiers) else None

    def takes(self, node: NodeShape, victims: Sequence[Running]) -> bool:
        """Whether ``job`` fits on ``node`` once ``victims`` are gone: the arithmetic
        first, then whether the node could ever take it (once per node), then every
        filter."""
        load = self.fleet.load(node.id)
        if not _room(node, load, self.job, victims):
            return False
        ok = self.static.get(node.id)
        if ok is None:
            ok = self.static[node.id] = first_rejection(node, NodeLoad(), self.job) is None
        return ok and _fits(node, load, self.job, victims)

    def one_victim(self, running: Preemptibles) -> tuple[str, tuple[Running]] | None:
        for victim in running.in_order():
            if victim.demand.priority >= self.job.priority:
                return None  # the rest are no lower than the job
            node = self.candidate(victim)
            if node is None:
                continue
            self.seen.setdefault(victim.node_id, []).append(victim)
            if self.takes(node, (victim,)):
                return victim.node_id, (victim,)
        return None

    def multi_nodes(self, running: Preemptibles) -> list[str]:
        """The nodes to search for several victims (after :meth:`one_victim` saw every
        candidate): those that take the job once all their candidates are gone, first by
        their preferred candidate."""
        chosen: list[str] = []
        for node_id, candidates in self.seen.items():  # in the order their first was seen
            if self.takes(self.fleet.node(node_id), candidates):
                chosen.append(node_id)
                if len(chosen) == MULTI_NODES:
                    break
        return chosen

    def preemption(self, node_id: str, victims: tuple[Running, ...]) -> Preemption:
        grace = max(v.demand.preempt_grace_sec for v in victims)
        return Preemption(self.job.job_id, node_id, tuple(v.job_id for v in victims), grace)


def _room(node: NodeShape, load: NodeLoad, job: JobDemand, victims: Iterable[Running]) -> bool:
    """A necessary condition of :func:`_fits`, in plain arithmetic: the CPU, RAM and GPUs
    the victims free cover what the job lacks (the filters decide the rest)."""
    cpu, ram, gpus = load.used_cpu, load.used_ram, load.used_gpu
    for victim in victims:
        d = victim.demand
        cpu, ram, gpus = cpu - d.cpu, ram - d.ram, gpus - d.gpus
    return (
        node.cpu_cores - cpu >= job.cpu
        and node.ram_gb - ram >= job.ram
        and (job.gpus == 0 or len(node.gpus) - gpus >= job.gpus)
    )


@dataclass(slots=True)
class Hold:
    """A preemption in flight: ``pending`` victims still hold their reservations; those
    gone are in ``freed`` (their reservations still counted on the node, for the job)."""

    preemption: Preemption
    demand: JobDemand
    pending: set[str]
    freed: list[JobDemand] = field(default_factory=list)


class Holds:
    """The preemptions in flight, by preemptor and by victim."""

    __slots__ = ("_by_job", "_by_victim")

    def __init__(self) -> None:
        self._by_job: dict[str, Hold] = {}
        self._by_victim: dict[str, str] = {}

    def __contains__(self, job_id: object) -> bool:
        """Whether ``job_id`` is a preemptor waiting for its victims."""
        return job_id in self._by_job

    def __len__(self) -> int:
        return len(self._by_job)

    def victims(self) -> Iterable[str]:
        return self._by_victim.keys()

    def get(self, job_id: str) -> Hold | None:
        """The preemption in flight of preemptor ``job_id``, if any."""
        return self._by_job.get(job_id)

    def start(self, preemption: Preemption, demand: JobDemand) -> Hold:
        hold = Hold(preemption, demand, set(preemption.victims))
        self._by_job[preemption.job_id] = hold
        for victim in preemption.victims:
            self._by_victim[victim] = preemption.job_id
        return hold

    def victim_gone(self, victim: JobDemand) -> tuple[Hold, bool] | None:
        """``victim`` released its node: its hold (None: it is no victim), and whether
        that was the last victim (the hold is then over and forgotten)."""
        job_id = self._by_victim.pop(victim.job_id, None)
        if job_id is None:
            return None
        hold = self._by_job[job_id]
        hold.pending.discard(victim.job_id)
        hold.freed.append(victim)
        if hold.pending:
            return hold, False
        del self._by_job[job_id]
        return hold, True

    def drop(self, job_id: str) -> Hold | None:
        """Give up the hold of preemptor ``job_id`` (cancelled, its node gone): the victims
        still pending are left to stop as they were told."""
        hold = self._by_job.pop(job_id, None)
        if hold is not None:
            for victim in hold.pending:
                self._by_victim.pop(victim, None)
        return hold

    def on_node(self, node_id: str) -> list[str]:
        """The preemptors waiting on ``node_id``."""
        return [j for j, h in self._by_job.items() if h.preemption.node_id == node_id]
