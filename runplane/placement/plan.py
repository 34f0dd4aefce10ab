"""Decisions: place one job, plan a queue, and the brute-force reference they must match."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from .explain import EMPTY_FLEET, Placement, Unplaced, unplaced
from .fairshare import Org, Standing
from .filters import FILTERS, first_rejection
from .gang import GangPlacement, place_gang
from .index import DEFAULT_PER_STREAM, STREAM_BUDGET, FleetIndex
from .model import JobDemand, NodeLoad, NodeShape
from .scoring import score_breakdown, score_gpu_fit
from .shelves import ITEMS, entry
from .walks import RANGED_STREAMS, STREAM_LISTS, streams_for


@dataclass(frozen=True, slots=True)
class Assignment:
    """Job ``job_id`` goes to ``node_id``, reserving ``cpu``/``ram_gb``/``gpus`` and a slot.

    The committer applies it (``fleet.reserve(node_id, job)`` or its own bookkeeping)."""

    job_id: str
    node_id: str
    score: float
    cpu: float
    ram_gb: float
    gpus: int
    #: a gang's rank (its ranks' assignments follow each other, rank 0 first)
    rank: int = 0


def assignments_of(job: JobDemand, outcome: Placement | GangPlacement) -> list[Assignment]:
    """The assignment of a placed job, or one per rank of a placed gang."""
    if isinstance(outcome, Placement):
        return [Assignment(job.job_id, outcome.node_id, outcome.score, job.cpu, job.ram, job.gpus)]
    return [
        Assignment(job.job_id, p.node_id, p.score, job.cpu, job.ram, job.gpus, rank)
        for rank, p in enumerate(outcome.ranks)
    ]


@dataclass(frozen=True, slots=True)
class Plan:
    """A plan over a queue: ``assignments`` in decision order, ``waiting`` per job that
    stays queued, and ``loads``: the resulting load of every node the plan touched (the
    delta a committer may apply wholesale)."""

    assignments: list[Assignment] = field(default_factory=list)
    waiting: dict[str, Unplaced] = field(default_factory=dict)
    loads: dict[str, NodeLoad] = field(default_factory=dict)


class Trial:
    """A plan's working state: reservations made on ``fleet`` through :meth:`reserve`,
    each node's load put back as it was on leaving the ``with`` block (however it is
    left). It costs O(nodes reserved on), where a copy of the fleet would cost O(n); the
    index's class and static verdicts do not read loads, so what a plan caches stays
    true after it."""

    __slots__ = ("_before", "fleet")

    def __init__(self, fleet: FleetIndex) -> None:
        self.fleet = fleet
        self._before: dict[str, NodeLoad] = {}

    def reserve(self, node_id: str, job: JobDemand) -> NodeLoad:
        self._before.setdefault(node_id, self.fleet.load(node_id))
        return self.fleet.reserve(node_id, job)

    def __enter__(self) -> Trial:
        return self

    def __exit__(self, *_: object) -> None:
        for node_id, load in self._before.items():
            self.fleet.update_load(node_id, load)
        self._before.clear()


def queue_order(jobs: Iterable[JobDemand]) -> list[JobDemand]:
    """Jobs in decision order: higher priority first, then oldest, then job id."""
    return sorted(jobs, key=lambda j: j.sort_key)


def _best(job: JobDemand, candidates: Iterable[tuple[NodeShape, NodeLoad]]) -> Placement | None:
    best: tuple[float, str, tuple[tuple[str, float], ...]] | None = None
    considered = 0
    for node, load in candidates:
        considered += 1
        total, parts = score_breakdown(node, load, job)
        if best is None or total > best[0] or (total == best[0] and node.id < best[1]):
            best = (total, node.id, parts)
    if best is None:
        return None
    return Placement(best[1], best[0], best[2], considered)


def place(
    job: JobDemand, fleet: FleetIndex, *, explain: bool = True
) -> Placement | GangPlacement | Unplaced:
    """Decide where ``job`` goes on ``fleet`` now (the fleet is not changed).

    The best of the index's candidates by score (ties: lowest node id), or why it waits;
    a gang's ranks on distinct nodes (:func:`~runplane.placement.gang.place_gang`).
    """
    if job.nodes > 1:
        return place_gang(job, fleet, explain=explain)
    found = fleet.best(job)
    if found is not None:
        return found
    return fleet.unplaced(job, explain=explain)


def fair_order(jobs: Iterable[JobDemand], shares: Standing) -> Iterator[JobDemand]:
    """Jobs in fair-share order: each org's jobs in :func:`queue_order`; the next job is
    the head of the org with the lowest ``shares.key`` (ties: the earlier head). The
    caller charges ``shares`` (``take``) for each job it assigns before asking for the
    next, so orgs take turns as the plan goes."""
    per_org: dict[Org, list[JobDemand]] = {}
    for job in queue_order(jobs):
        per_org.setdefault(job.org_id, []).append(job)
    at = dict.fromkeys(per_org, 0)
    while per_org:
        org = min(per_org, key=lambda o: (shares.key(o), per_org[o][at[o]].sort_key))
        yield per_org[org][at[org]]
        at[org] += 1
        if at[org] == len(per_org[org]):
            del per_org[org]


def plan(
    queue: Iterable[JobDemand],
    fleet: FleetIndex,
    *,
    explain: bool = True,
    shares: Standing | None = None,
) -> Plan:
    """Place a queue in :func:`queue_order`, each assignment's reservation counted against
    the jobs after it (in a :class:`Trial`: ``fleet`` is as it was when it returns).

    Greedy with backfill: a job that does not fit waits and later, smaller jobs may still
    be placed. Loads only grow during a plan, so once a job fails, every later job with
    the same :attr:`JobDemand.fit_signature` fails too: it reuses the first one's outcome
    without a search. With ``shares`` and jobs of more than one org, the order is
    :func:`fair_order` (``shares`` charged for each assignment).
    """
    result = Plan()
    failed: dict[tuple[object, ...], Unplaced] = {}
    jobs = list(queue)
    order: Iterable[JobDemand] = queue_order(jobs)
    if shares is not None and len({j.org_id for j in jobs}) > 1:
        order = fair_order(jobs, shares)
    with Trial(fleet) as work:
        for job in order:
            known = failed.get(job.fit_signature)
            if known is not None:
                result.waiting[job.job_id] = known
                continue
            outcome = place(job, fleet, explain=explain)
            if isinstance(outcome, Unplaced):
                failed[job.fit_signature] = outcome
                result.waiting[job.job_id] = outcome
                continue
            for assignment in assignments_of(job, outcome):
                node_id = assignment.node_id
                result.loads[node_id] = work.reserve(node_id, job)
                result.assignments.append(assignment)
            if shares is not None:
                shares.take(job.org_id, job)
    return result


# --- the reference: every node filtered, every stream sorted in full ---------------------

#: The eligibility filters (the index keeps nodes that fail them off a stream's walk) and
#: the fit filters (every node a stream visits must pass them), each checked in full here.
_ELIGIBLE = tuple(f for f in FILTERS if f.eligibility)
_FITS = tuple(f for f in FILTERS if not f.eligibility)


def stream_key(stream: str, job: JobDemand) -> Callable[[NodeShape, NodeLoad], tuple[object, ...]]:
    """The order a candidate stream visits nodes in (smallest key first): the index's
    sorted-list item (:data:`~runplane.placement.shelves.ITEMS`); for ``gpu_fit``, the
    ``fit`` item behind the node's ``gpu_fit`` score, best first."""
    if stream == "gpu_fit":
        fit = ITEMS["fit"]
        return lambda n, ld: (-score_gpu_fit(n, ld, job), *fit(entry(n, ld)))
    item = ITEMS[STREAM_LISTS[stream]]
    return lambda n, ld: item(entry(n, ld))


def reference_candidates(
    job: JobDemand,
    nodes: Iterable[tuple[NodeShape, NodeLoad]],
    *,
    per_stream: int = DEFAULT_PER_STREAM,
    stream_budget: int = STREAM_BUDGET,
) -> list[tuple[NodeShape, NodeLoad]]:
    """Brute-force candidate set: the union of :func:`reference_stream_takes`."""
    chosen: dict[str, tuple[NodeShape, NodeLoad]] = {}
    for take in reference_stream_takes(
        job, nodes, per_stream=per_stream, stream_budget=stream_budget
    ).values():
        for node, load in take:
            chosen[node.id] = (node, load)
    return list(chosen.values())


def reference_stream_takes(
    job: JobDemand,
    nodes: Iterable[tuple[NodeShape, NodeLoad]],
    *,
    per_stream: int = DEFAULT_PER_STREAM,
    stream_budget: int = STREAM_BUDGET,
) -> dict[str, list[tuple[NodeShape, NodeLoad]]]:
    """Per stream: sort every eligible node (for ranged streams, those with enough free
    CPU; for ``image_cached``, those holding one of the job's images), keep the first
    ``stream_budget * per_stream`` (all for ``fit``), take the first
    ``per_stream`` that fit."""
    eligible = [(n, ld) for n, ld in nodes if first_rejection(n, ld, job, _ELIGIBLE) is None]
    if not eligible:
        return {}
    takes: dict[str, list[tuple[NodeShape, NodeLoad]]] = {}
    for stream in streams_for(job):
        pool = eligible
        if stream in RANGED_STREAMS:
            pool = [(n, ld) for n, ld in pool if n.cpu_cores - ld.used_cpu >= job.cpu]
        if stream == "image_cached":  # the nodes whose cache holds one of its images
            pool = [(n, ld) for n, ld in pool if job.image_digests & n.images]
        key = stream_key(stream, job)
        visited = sorted(pool, key=lambda p: key(*p))
        if stream != "fit":
            visited = visited[: stream_budget * per_stream]
        fitting = [p for p in visited if first_rejection(p[0], p[1], job, _FITS) is None]
        takes[stream] = fitting[:per_stream]
    return takes


def reference_place(
    job: JobDemand,
    nodes: Iterable[tuple[NodeShape, NodeLoad]],
    *,
    per_stream: int = DEFAULT_PER_STREAM,
    stream_budget: int = STREAM_BUDGET,
) -> Placement | Unplaced:
    """Brute force over every node: what :func:`place` must return (tests, benchmarks).

    With ``per_stream`` at least the fleet size it scores every feasible node.
    """
    pairs = list(nodes)
    if not pairs:
        return Unplaced(EMPTY_FLEET, True, {}, 0)
    counts: Counter[str] = Counter()
    matching = 0
    for node, load in pairs:
        rejection = first_rejection(node, load, job)
        if rejection is None or not rejection.static:
            matching += 1
        if rejection is not None:
            counts[rejection.reason] += 1
    candidates = reference_candidates(
        job, pairs, per_stream=per_stream, stream_budget=stream_budget
    )
    found = _best(job, candidates)
    if found is not None:
        return found
    return unplaced(counts, job, matching)


def reference_plan(
    queue: Iterable[JobDemand],
    nodes: Mapping[str, tuple[NodeShape, NodeLoad]],
    *,
    per_stream: int = DEFAULT_PER_STREAM,
    stream_budget: int = STREAM_BUDGET,
) -> Plan:
    """Brute-force :func:`plan` (no memo of failures)."""
    work = dict(nodes)
    result = Plan()
    for job in queue_order(queue):
        outcome = reference_place_gang(
            job, work, per_stream=per_stream, stream_budget=stream_budget
        )
        if isinstance(outcome, Unplaced):
            result.waiting[job.job_id] = outcome
            continue
        for assignment in assignments_of(job, outcome):
            node, load = work[assignment.node_id]
            load = load.plus(job.cpu, job.ram, job.gpus, 1, job.org_id)
            work[assignment.node_id] = (node, load)
            result.loads[assignment.node_id] = load
            result.assignments.append(assignment)
    return result


def reference_place_gang(
    job: JobDemand,
    nodes: Mapping[str, tuple[NodeShape, NodeLoad]],
    *,
    per_stream: int = DEFAULT_PER_STREAM,
    stream_budget: int = STREAM_BUDGET,
) -> Placement | GangPlacement | Unplaced:
    """Brute-force :func:`place` of a job or a gang: each rank by :func:`reference_place`
    over the nodes no earlier rank took (a gang that does not fit whole waits)."""
    if job.nodes == 1:
        return reference_place(
            job, nodes.values(), per_stream=per_stream, stream_budget=stream_budget
        )
    work = dict(nodes)
    ranks: list[Placement] = []
    for _ in range(job.nodes):
        outcome = reference_place(
            job, work.values(), per_stream=per_stream, stream_budget=stream_budget
        )
        if isinstance(outcome, Unplaced):
            # the ranks chosen count as matching (made full, they are only busy)
            static = outcome.matching < job.nodes
            return Unplaced(outcome.reason, static, outcome.counts, outcome.matching)
        ranks.append(outcome)
        node, load = work[outcome.node_id]
        work[outcome.node_id] = (node, replace(load, active_jobs=node.max_concurrency))
    return GangPlacement(tuple(ranks))
