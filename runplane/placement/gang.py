"""Gangs: a job of ``nodes`` ranks placed all at once on as many distinct nodes, or not
at all (docs/placement.md "Gangs").

Rank 0 goes to the best-scoring node (:meth:`FleetIndex.best`); each next rank to the
best of the nodes left: a chosen node is made full for the rest of the search (its load's
job slots all taken) and every load is put back before :func:`place_gang` returns, so a
gang that does not fit leaves the fleet as it was and holds nothing. Two gangs can thus
never each hold part of what the other needs (no deadlock). A plain job (``nodes`` 1)
never comes here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import filters as f
from .explain import Placement, Unplaced, unplaced
from .index import FleetIndex
from .model import JobDemand, NodeLoad


@dataclass(frozen=True, slots=True)
class GangPlacement:
    """Rank ``i`` goes to ``ranks[i]`` (distinct nodes; rank 0 the best-scoring)."""

    ranks: tuple[Placement, ...]

    @property
    def node_ids(self) -> tuple[str, ...]:
        return tuple(p.node_id for p in self.ranks)


def place_gang(
    job: JobDemand, fleet: FleetIndex, *, explain: bool = True
) -> GangPlacement | Unplaced:
    """Where each of ``job``'s ranks goes now, or why the gang waits (``fleet`` is as it
    was when it returns)."""
    chosen: list[Placement] = []
    before: dict[str, NodeLoad] = {}
    try:
        for _ in range(job.nodes):
            found = fleet.best(job)
            if found is None:
                return _waits(job, fleet, len(chosen), explain)
            chosen.append(found)
            load = before[found.node_id] = fleet.load(found.node_id)
            full = fleet.node(found.node_id).max_concurrency
            fleet.update_load(found.node_id, replace(load, active_jobs=full))
    finally:
        for node_id, load in before.items():
            fleet.update_load(node_id, load)
    return GangPlacement(tuple(chosen))


def _waits(job: JobDemand, fleet: FleetIndex, fit: int, explain: bool) -> Unplaced:
    """The gang waits: ``fit`` nodes (made full by the search) could take a rank now; the
    others say why they cannot, as a plain job's reason would. Static when fewer nodes
    than ranks could ever run a rank."""
    rest = fleet.unplaced(job, explain=explain)
    counts = dict(rest.counts)
    if fit and counts.get(f.SLOTS_FULL):
        counts[f.SLOTS_FULL] -= fit  # the chosen ones: not busy, only taken by this gang
    matching = max(0, rest.matching - fit)
    others = unplaced(counts, job, matching)
    reason = gang_reason(job, fit, others, bool(others.counts) or matching > 0)
    return Unplaced(reason, rest.matching < job.nodes, others.counts, rest.matching)


def gang_reason(job: JobDemand, fit: int, others: Unplaced, any_other: bool) -> str:
    """``gang of 3 ranks: 2 nodes fit now (<why the other nodes do not>)``."""
    fits = "1 node fits now" if fit == 1 else f"{fit} nodes fit now"
    head = f"gang of {job.nodes} ranks: {fits}"
    return f"{head} ({others.reason})" if any_other else head


#: The ports a gang's rank 0 may be told to listen on (``RUNPLANE_MASTER_PORT``): the
#: lowest not used by another gang whose rank 0 runs on the same node.
MASTER_PORTS = range(29500, 30000)


@dataclass(frozen=True, slots=True)
class Seat:
    """A placed gang: its rank nodes (rank 0 first) and rank 0's master port."""

    nodes: tuple[str, ...]
    master_port: int


class Seats:
    """The placed gangs (the placement actor's): each one's nodes and master port."""

    __slots__ = ("_by_job", "_ports")

    def __init__(self) -> None:
        self._by_job: dict[str, Seat] = {}
        self._ports: dict[str, set[int]] = {}  # rank 0's node -> master ports in use

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._by_job

    def __len__(self) -> int:
        return len(self._by_job)

    def get(self, job_id: str) -> Seat | None:
        return self._by_job.get(job_id)

    def seat(self, job_id: str, nodes: tuple[str, ...], port: int | None = None) -> Seat:
        """Record a placed gang; its master port is ``port`` (a rebuild: the stored one)
        or the lowest free on rank 0's node (the range's first when all are taken:
        rank 0's agent then fails the attempt, saying the port is not free)."""
        used = self._ports.setdefault(nodes[0], set())
        if port is None:
            port = next((p for p in MASTER_PORTS if p not in used), MASTER_PORTS[0])
        used.add(port)
        seat = self._by_job[job_id] = Seat(nodes, port)
        return seat

    def drop(self, job_id: str) -> Seat | None:
        seat = self._by_job.pop(job_id, None)
        if seat is not None:
            used = self._ports.get(seat.nodes[0])
            if used is not None:
                used.discard(seat.master_port)
                if not used:
                    del self._ports[seat.nodes[0]]
        return seat

    def others_on(self, node_id: str) -> set[str]:
        """The gangs with a rank other than rank 0 on ``node_id``."""
        return {j for j, s in self._by_job.items() if node_id in s.nodes[1:]}


def release_ranks(fleet: FleetIndex, seat: Seat, job: JobDemand) -> None:
    """Give back what a gang's ranks other than rank 0 hold (on nodes still there)."""
    for node_id in seat.nodes[1:]:
        if node_id in fleet:
            fleet.release(node_id, job)
