"""What a job actor talks to (``runplane/actors/job.py``), injected so it knows no HTTP,
no socket and none of the services that follow a job:

- the store and the hub (its rows and events; its ring),
- :class:`NodeLink`: the job's node (deliver an order; make the run and cancel orders),
- :class:`PlacementLink`: placement's queue and reservations, and the node's attempt
  counters,
- :class:`StreamSetup`: what its streams need,
- :class:`~runplane.jobs.transitions.Transitions`: who follows its transitions (admission,
  pipelines, sessions, webhooks, git statuses subscribe there, not here).

``Root._wire`` builds it from the real services (``runplane/services/job_links.py``); the
actor's unit tests from fakes (``tests/actors/test_job_actor_unit.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

from runplane.agent import protocol as p
from runplane.jobs.rows import JobRow
from runplane.jobs.transitions import Transitions
from runplane.nodes.status import AttemptOutcome
from runplane.persistence import Store
from runplane.runtime import Hub
from runplane.streams.acks import TeleopAcks
from runplane.streams.chunks import DEFAULT_RING


class NodeLink(Protocol):
    """The job's node: its orders, made and delivered."""

    async def deliver(self, node_id: str, order: p.Run | p.Cancel | p.Teleop) -> bool:
        """Hand ``order`` to the node's agent; True when a live connection took it."""
        ...

    async def run_order(self, row: JobRow, attempt: int) -> p.Run:
        """The agent's run order for ``attempt``: its mounts' credentials, its sealed env
        opened, its org secrets' values (never stored with the job)."""
        ...

    def cancel_order(self, job_id: str, attempt: int) -> p.Cancel: ...

    def address(self, node_id: str) -> str | None:
        """How other nodes reach ``node_id`` (a gang's ``RUNPLANE_MASTER_ADDR``)."""
        ...


class PlacementLink(Protocol):
    """Placement's queue and reservations, and the node's reliability counters."""

    async def enqueue(self, row: JobRow) -> None: ...

    async def dequeue(self, job_id: str) -> None: ...

    async def release(self, job_id: str) -> None:
        """Give the capacity (GPUs included) reserved for the job on its node back."""
        ...

    async def reprioritize(self, job_id: str, priority: int) -> None: ...

    async def node_outcome(self, node_id: str, outcome: AttemptOutcome) -> None:
        """The node placed, lost or finished an attempt (its reliability counters)."""
        ...


@dataclass(frozen=True, slots=True)
class StreamSetup:
    """What a job's streams need: the kind of each stream a stack declares (stack name ->
    {name: kind}), the chunks a stream's ring keeps, the teleop frames waiting for their
    agent, and the server's stream counters (``runplane/services/streams.py``)."""

    kinds: Callable[[str], dict[str, str]] = lambda stack: {}
    ring: int = DEFAULT_RING
    teleop_acks: TeleopAcks = field(default_factory=TeleopAcks)
    counters: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobDeps:
    """What a job actor talks to, injected so it knows no HTTP and no socket."""

    store: Store
    hub: Hub
    node: NodeLink
    placement: PlacementLink
    streams: StreamSetup = field(default_factory=StreamSetup)
    transitions: Transitions = field(default_factory=Transitions)
