"""The real links of the job actors (``runplane/actors/job_deps.py``): the node link
(run orders made from the row with its mounts' credentials, sealed env and org secrets;
delivered through the fleet) and the placement link (placement's mailbox, the fleet's
attempt counters). ``Root._wire`` builds them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from runplane import vault
from runplane.actors import placement as pl
from runplane.agent import protocol as p
from runplane.jobs.jobspec import opened
from runplane.jobs.orders import cancel_order, run_order
from runplane.jobs.rows import JobRow
from runplane.nodes.status import AttemptOutcome
from runplane.persistence import Store
from runplane.runtime import ActorRef
from runplane.sealing import Sealer
from runplane.services.fleet import Fleet
from runplane.services.git import Git
from runplane.services.images import Images


class FleetLink:
    """A job's node, through the fleet: its run order made here, delivered there."""

    def __init__(
        self,
        store: Store,
        fleet: Fleet,
        git: Git,
        sealer: Callable[[], Sealer],
        images: Images | None = None,
    ):
        self.store = store
        self.fleet = fleet
        self.git = git
        self.sealer = sealer
        self.images = images

    async def deliver(self, node_id: str, order: p.Run | p.Cancel | p.Teleop) -> bool:
        return await self.fleet.deliver(node_id, order)

    async def run_order(self, row: JobRow, attempt: int) -> p.Run:
        """With the credentials its mounts clone with (docs/git.md), its sealed plain env
        values opened and masked (runplane/sealed_env.py), the values of the org secrets
        its env references (docs/secrets.md), and for an image job where its images are
        pulled from with the org's registry credential (docs/containers.md): none of them
        stored with the job."""
        auth: dict[str, str] = {}
        if row.spec.connection_ids():
            auth = await self.git.mount_auth(row, attempt)
        masked: list[str] = []
        if row.spec.has_sealed():
            spec, masked = opened(row.spec, self.sealer, row.org_id)
            row = replace(row, spec=spec)
        secrets: dict[str, str] = {}
        refs = row.spec.secret_references()
        if refs:
            names = {name for found in refs.values() for name in found}
            secrets = await vault.values(self.store, self.sealer(), row.org_id, names)
        images: dict[str, p.ImageOrder] = {}
        if self.images is not None and row.spec.containers():
            images = await self.images.orders(row)
        return run_order(row, attempt, auth, secrets, masked, images)

    def cancel_order(self, job_id: str, attempt: int) -> p.Cancel:
        return cancel_order(job_id, attempt)

    def address(self, node_id: str) -> str | None:
        """How other nodes reach ``node_id`` (a gang's master address), if known."""
        return self.fleet.addresses.get(node_id)


class PlacementQueue:
    """Placement's queue and reservations (its actor's mailbox), and the fleet's attempt
    counters."""

    def __init__(self, placement: ActorRef[pl.PlacementMsg], fleet: Fleet) -> None:
        self.placement = placement
        self.fleet = fleet

    async def enqueue(self, row: JobRow) -> None:
        await self.placement.tell(pl.Enqueue.of(row))

    async def dequeue(self, job_id: str) -> None:
        await self.placement.tell(pl.Dequeue(job_id))

    async def release(self, job_id: str) -> None:
        await self.placement.tell(pl.Release(job_id))

    async def reprioritize(self, job_id: str, priority: int) -> None:
        await self.placement.tell(pl.Reprioritize(job_id, priority))

    async def node_outcome(self, node_id: str, outcome: AttemptOutcome) -> None:
        await self.fleet.node_outcome(node_id, outcome)
