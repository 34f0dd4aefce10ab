"""Fakes of what a job actor talks to (``runplane/actors/job_deps.py``): a node link that
records the orders it delivers and a placement link that records what it was told; with
a real store and hub they build a ``JobActor`` without the actor tree."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runplane.actors.job_deps import JobDeps
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.jobs.orders import cancel_order, run_order
from runplane.jobs.rows import JobRow
from runplane.jobs.spec import SubmitJobBody, resolve
from runplane.jobs.transitions import Transitions
from runplane.nodes.status import AttemptOutcome
from runplane.persistence import Store
from runplane.runtime import Hub
from runplane.stacks import load_catalog

CATALOG = load_catalog()


def shell_spec(cpu: int = 2, **body: Any) -> dict[str, Any]:
    """A shell job's spec as submit resolves it (``body``: more of the submit body)."""
    submit = SubmitJobBody.model_validate({"stack": "shell", "limits": {"cpu_cores": cpu}, **body})
    return resolve(submit, CATALOG).spec


async def insert(store: Store, job_id: str, cpu: int = 2, **body: Any) -> JobRow:
    """A queued shell job's row, as submit stores it."""
    job = repo.NewJob(
        id=job_id,
        org_id="org_x",
        project="p",
        submitted_by="u",
        spec=shell_spec(cpu, **body),
        spec_hash="h" * 64,
        priority=0,
    )
    row = await store.transaction(repo.insert_job(store, job))
    assert isinstance(row, JobRow)
    return row


@dataclass
class FakeNode:
    """The node link: every order delivered, in order; ``reachable`` False: none taken."""

    delivered: list[tuple[str, p.Run | p.Cancel | p.Teleop]] = field(default_factory=list)
    reachable: bool = True

    async def deliver(self, node_id: str, order: p.Run | p.Cancel | p.Teleop) -> bool:
        self.delivered.append((node_id, order))
        return self.reachable

    async def run_order(self, row: JobRow, attempt: int) -> p.Run:
        return run_order(row, attempt)

    def cancel_order(self, job_id: str, attempt: int) -> p.Cancel:
        return cancel_order(job_id, attempt)

    def address(self, node_id: str) -> str | None:
        return f"{node_id}.example"  # a gang's master address

    def orders(self) -> list[p.Run | p.Cancel | p.Teleop]:
        return [order for _, order in self.delivered]


@dataclass
class FakePlacement:
    """The placement link: what it was told, as (verb, job or node id) in order."""

    told: list[tuple[str, str]] = field(default_factory=list)
    outcomes: list[tuple[str, AttemptOutcome]] = field(default_factory=list)

    async def enqueue(self, row: JobRow) -> None:
        self.told.append(("enqueue", row.id))

    async def dequeue(self, job_id: str) -> None:
        self.told.append(("dequeue", job_id))

    async def release(self, job_id: str) -> None:
        self.told.append(("release", job_id))

    async def reprioritize(self, job_id: str, priority: int) -> None:
        self.told.append(("reprioritize", job_id))

    async def node_outcome(self, node_id: str, outcome: AttemptOutcome) -> None:
        self.outcomes.append((node_id, outcome))


@dataclass
class Fakes:
    node: FakeNode = field(default_factory=FakeNode)
    placement: FakePlacement = field(default_factory=FakePlacement)
    transitions: Transitions = field(default_factory=Transitions)

    def deps(self, store: Store, hub: Hub) -> JobDeps:
        return JobDeps(
            store, hub, node=self.node, placement=self.placement, transitions=self.transitions
        )
