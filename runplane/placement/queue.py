"""The queue of waiting jobs, grouped by fit signature, each group in queue order.

Jobs with equal :attr:`JobDemand.fit_signature` get equal verdicts from every filter, and
loads only grow during a plan: once one job of a group fails, every later one fails too.
:func:`plan_groups` therefore walks the groups' heads in queue order (a heap merge) and
drops a group at its first failure. A plan costs a decision per group plus one per
assignment, not one per queued job: 100,000 queued jobs of a few shapes plan as fast as
a hundred. It makes the same decisions as :func:`runplane.placement.plan.plan` over the
same jobs (a test holds them equal).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from sortedcontainers import SortedList

from .explain import Unplaced
from .fairshare import Org, Standing
from .index import FleetIndex
from .model import CreatedAt, JobDemand
from .plan import Assignment, Trial, assignments_of, place

Signature = tuple[object, ...]
SortKey = tuple[int, CreatedAt, str]  # JobDemand.sort_key


class JobQueue:
    """Waiting jobs by id, and by fit signature in queue order (higher priority first,
    then oldest, then id)."""

    __slots__ = ("_groups", "_jobs", "_orgs")

    def __init__(self, jobs: Iterable[JobDemand] = ()) -> None:
        self._jobs: dict[str, JobDemand] = {}
        self._groups: dict[Signature, SortedList[SortKey]] = {}
        #: waiting jobs per org (fair share applies when more than one org waits)
        self._orgs: dict[str | None, int] = {}
        for job in jobs:
            self.add(job)

    def __len__(self) -> int:
        return len(self._jobs)

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._jobs

    def __iter__(self) -> Iterator[str]:
        return iter(self._jobs)

    def get(self, job_id: str) -> JobDemand | None:
        return self._jobs.get(job_id)

    def values(self) -> Iterable[JobDemand]:
        return self._jobs.values()

    def as_dict(self) -> dict[str, JobDemand]:
        return dict(self._jobs)

    def add(self, job: JobDemand) -> None:
        """Queue ``job`` (replacing a job of the same id)."""
        self.pop(job.job_id)
        self._jobs[job.job_id] = job
        group = self._groups.get(job.fit_signature)
        if group is None:
            group = self._groups[job.fit_signature] = SortedList()
        group.add(job.sort_key)
        self._orgs[job.org_id] = self._orgs.get(job.org_id, 0) + 1

    def pop(self, job_id: str) -> JobDemand | None:
        job = self._jobs.pop(job_id, None)
        if job is not None:
            group = self._groups[job.fit_signature]
            group.remove(job.sort_key)
            if not len(group):
                del self._groups[job.fit_signature]
            left = self._orgs[job.org_id] - 1
            if left:
                self._orgs[job.org_id] = left
            else:
                del self._orgs[job.org_id]
        return job

    def orgs(self) -> dict[str | None, int]:
        """Waiting jobs per org (a copy)."""
        return dict(self._orgs)

    def org_count(self) -> int:
        return len(self._orgs)

    def signatures(self) -> Iterable[Signature]:
        return self._groups.keys()

    def group(self, signature: Signature) -> Iterator[str]:
        """The ids of the group's jobs, in queue order (do not change the queue meanwhile)."""
        for key in self._groups.get(signature, ()):
            yield key[2]

    def group_size(self, signature: Signature) -> int:
        group = self._groups.get(signature)
        return len(group) if group is not None else 0


@dataclass(slots=True)
class GroupPlan:
    """``assignments`` in decision order; ``waiting``: per fit signature, why the group's
    jobs that were not assigned wait."""

    assignments: list[Assignment] = field(default_factory=list)
    waiting: dict[Signature, Unplaced] = field(default_factory=dict)


def plan_groups(
    queue: JobQueue,
    fleet: FleetIndex,
    *,
    explain: bool = True,
    shares: Standing | None = None,
) -> GroupPlan:
    """Place ``queue`` in queue order, each assignment's reservation counted against the
    jobs after it (in a :class:`~runplane.placement.plan.Trial`: ``fleet`` is as it was
    when it returns), greedy with backfill, as :func:`runplane.placement.plan.plan` does.

    With ``shares`` and jobs of more than one org waiting, orgs take turns by fair share
    (:func:`runplane.placement.fairshare`; ``shares`` is charged for what is assigned);
    otherwise it is the plain queue order, at no extra cost."""
    if shares is not None and queue.org_count() > 1:
        return _plan_fair(queue, fleet, shares, explain)
    result = GroupPlan()
    heads: list[tuple[SortKey, Signature]] = []
    walkers: dict[Signature, Iterator[SortKey]] = {}
    for signature in queue.signatures():
        walker = iter(queue._groups[signature])
        first = next(walker, None)
        if first is not None:
            walkers[signature] = walker
            heads.append((first, signature))
    heapq.heapify(heads)
    with Trial(fleet) as work:
        while heads:
            key, signature = heapq.heappop(heads)
            job = queue._jobs[key[2]]
            outcome = place(job, fleet, explain=explain)
            if isinstance(outcome, Unplaced):
                result.waiting[signature] = outcome  # the rest of the group waits too
                continue
            for assignment in assignments_of(job, outcome):
                work.reserve(assignment.node_id, job)
                result.assignments.append(assignment)
            following = next(walkers[signature], None)
            if following is not None:
                heapq.heappush(heads, (following, signature))
    return result


def _plan_fair(queue: JobQueue, fleet: FleetIndex, shares: Standing, explain: bool) -> GroupPlan:
    """:func:`plan_groups` between orgs: a heap of each org's group heads, and a heap of
    orgs by (fair-share key, head): the org first in it tries its head; an assignment
    charges the org and puts it back with its new key."""
    result = GroupPlan()
    heads: dict[Org, list[tuple[SortKey, Signature]]] = {}
    walkers: dict[Signature, Iterator[SortKey]] = {}
    for signature, group in queue._groups.items():
        walker = iter(group)
        first = next(walker)
        walkers[signature] = walker
        heads.setdefault(queue._jobs[first[2]].org_id, []).append((first, signature))
    turns: list[tuple[float, SortKey, Org]] = []
    for org, org_heads in heads.items():
        heapq.heapify(org_heads)
        turns.append((shares.key(org), org_heads[0][0], org))
    heapq.heapify(turns)
    with Trial(fleet) as work:
        while turns:
            _, _, org = heapq.heappop(turns)
            org_heads = heads[org]
            key, signature = heapq.heappop(org_heads)
            job = queue._jobs[key[2]]
            outcome = place(job, fleet, explain=explain)
            if isinstance(outcome, Unplaced):
                result.waiting[signature] = outcome
            else:
                for assignment in assignments_of(job, outcome):
                    work.reserve(assignment.node_id, job)
                    result.assignments.append(assignment)
                shares.take(org, job)
                following = next(walkers[signature], None)
                if following is not None:
                    heapq.heappush(org_heads, (following, signature))
            if org_heads:
                heapq.heappush(turns, (shares.key(org), org_heads[0][0], org))
    return result
