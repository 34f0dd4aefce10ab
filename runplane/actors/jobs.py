"""The jobs service: the client functions routes call to create and control jobs.

Submission resolves and checks the body, writes the job row (with its Idempotency-Key)
durably, then activates the job actor, which hands the job to placement. Control messages
(cancel, priority) go to the job's actor through the registry; reads come from the store,
which every transition reaches before it is announced.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from runplane.actors import placement as pl
from runplane.actors.job import Cancel, CancelOutcome, JobActor, JobDeps, SetPriority
from runplane.agent import protocol as p
from runplane.ids import new_id
from runplane.jobs import repo
from runplane.jobs.phase import Phase
from runplane.jobs.spec import (
    SETUP_KEY,
    ResolvedJob,
    SubmitJobBody,
    canonical_json,
    execution_env,
    inline_path,
    mount_relpath,
    output_glob,
    resolve,
)
from runplane.persistence import Store, from_json
from runplane.placement import DemandError, JobDemand
from runplane.problems import FieldProblem, Problem, not_found
from runplane.runtime import ActorRef, Registry
from runplane.stacks import Catalog

JOB_KIND = "job"
#: A terminal job actor idle this long is passivated (its state is all in the store).
JOB_IDLE_SEC = 30.0


@dataclass(frozen=True, slots=True)
class Submitter:
    org_id: str
    subject: str = ""


def _mount_order(mount: dict[str, Any]) -> p.MountSpec:
    inline = mount["type"] == "inline"
    return p.MountSpec(
        type=mount["type"],
        path=inline_path(mount["path"]) if inline else mount_relpath(mount["path"]),
        ref=mount.get("ref") or "",
        mode=mount.get("mode") or "rw",
    )


def run_order(row: dict[str, Any], attempt: int) -> p.Run:
    """The agent's run order: command, environment, and the mounts it prepares while the job
    is ``pulling`` (inline code included, so ``inline_files`` stays empty) and the output
    globs it uploads after the command ends."""
    spec = from_json(row["spec"]) if isinstance(row["spec"], str) else row["spec"]
    timeout = (spec.get("limits") or {}).get("timeout_sec") or None
    workspace = spec.get("workspace")
    inputs = [m for m in spec.get("inputs") or [] if m]
    return p.Run(
        job_id=row["id"],
        attempt=attempt,
        spec=p.RunSpec(
            command=spec["command"],
            env=execution_env(row["id"], spec),
            setup=(spec.get("env") or {}).get(SETUP_KEY) or None,
            timeout_sec=timeout,
            workspace=_mount_order(workspace) if workspace else None,
            inputs=[_mount_order(m) for m in inputs],
            outputs=[
                p.OutputGlob(
                    artifact=o["artifact"],
                    glob=output_glob(o["glob"]),
                    optional=bool(o.get("optional")),
                )
                for o in spec.get("outputs") or []
            ],
        ),
    )


def cancel_order(job_id: str, attempt: int) -> p.Cancel:
    return p.Cancel(job_id=job_id, attempt=attempt)


def _check_placeable(resolved: ResolvedJob) -> None:
    spec = resolved.spec
    try:
        JobDemand.from_spec(
            job_id="check",
            priority=resolved.priority,
            created_at="",
            limits=spec["limits"],
            requires=spec["requires"],
            weights=spec["weights"],
            weights_preset=spec["weights_preset"],
        )
    except DemandError as exc:
        errors = [FieldProblem(pr.key, pr.code, pr.message) for pr in exc.problems]
        raise Problem(422, "invalid_placement", str(exc), errors) from None


class Jobs:
    def __init__(
        self, store: Store, catalog: Catalog, registry: Registry, placement: ActorRef[Any]
    ) -> None:
        self.store = store
        self.catalog = catalog
        self.registry = registry
        self.placement = placement
        self._fresh: dict[str, dict[str, Any]] = {}

    def register(self, deps: JobDeps) -> None:
        async def activate(job_id: str) -> JobActor:
            # a job just inserted is activated from the row in hand, not read back
            row = self._fresh.get(job_id) or await repo.get_row(self.store, job_id, None)
            if row is None:
                raise LookupError(f"job {job_id} has no row")
            return JobActor(deps, row)

        self.registry.register(JOB_KIND, activate, idle_timeout=JOB_IDLE_SEC, mailbox_capacity=256)

    async def recover(self) -> int:
        """At start-up: re-activate every live job (queued ones re-enter placement; jobs on
        nodes wait for their node to come back within the grace period)."""
        rows = await repo.live_rows(self.store)
        for row in rows:
            if Phase(row["phase"]).on_node:
                await self.placement.tell(pl.Restore(row))
            await self.registry.get(JOB_KIND, row["id"])
        return len(rows)

    async def submit(
        self, body: SubmitJobBody, who: Submitter, *, idempotency_key: str | None = None
    ) -> dict[str, Any]:
        resolved = resolve(body, self.catalog)
        _check_placeable(resolved)
        return await self._create(
            resolved, who, idempotency_key=idempotency_key, body_hash=_body_hash(body)
        )

    async def rerun(self, job_id: str, who: Submitter, org_id: str | None) -> dict[str, Any]:
        row = await repo.get_row(self.store, job_id, org_id)
        if row is None:
            raise not_found("job")
        spec = from_json(row["spec"])
        resolved = ResolvedJob(
            spec=spec, spec_hash=row["spec_hash"], priority=row["priority"], project=row["project"]
        )
        return await self._create(resolved, Submitter(row["org_id"], who.subject))

    async def _create(
        self,
        resolved: ResolvedJob,
        who: Submitter,
        *,
        idempotency_key: str | None = None,
        body_hash: str | None = None,
    ) -> dict[str, Any]:
        new = repo.NewJob(
            id=new_id("job_"),
            org_id=who.org_id,
            project=resolved.project,
            submitted_by=who.subject,
            spec=resolved.spec,
            spec_hash=resolved.spec_hash,
            priority=resolved.priority,
            idempotency_key=idempotency_key,
            idempotency_hash=body_hash if idempotency_key else None,
        )
        inserted = await self.store.transaction(repo.insert_job(self.store, new))
        if isinstance(inserted, dict):
            self._fresh[new.id] = inserted
            try:
                await self.registry.get(JOB_KIND, new.id)  # activation enqueues it
            finally:
                del self._fresh[new.id]
            return inserted
        await self.registry.get(JOB_KIND, inserted)  # an Idempotency-Key replay
        row = await repo.get_row(self.store, inserted, None)
        assert row is not None
        return row

    async def cancel(self, job_id: str, org_id: str | None) -> tuple[dict[str, Any], CancelOutcome]:
        row = await self._visible(job_id, org_id)
        if Phase(row["phase"]).terminal:
            return row, CancelOutcome(cancelled=False, killed_on_node=False)
        outcome: CancelOutcome = await self.registry.ask(JOB_KIND, job_id, Cancel())
        fresh = await repo.get_row(self.store, job_id, None)
        assert fresh is not None
        return fresh, outcome

    async def set_priority(self, job_id: str, org_id: str | None, priority: int) -> dict[str, Any]:
        await self._visible(job_id, org_id)
        await self.registry.ask(JOB_KIND, job_id, SetPriority(priority))
        fresh = await repo.get_row(self.store, job_id, None)
        assert fresh is not None
        return fresh

    async def wait_reasons(self, rows: list[dict[str, Any]]) -> dict[str, str]:
        queued = tuple(r["id"] for r in rows if r["phase"] == Phase.QUEUED.value)
        if not queued:
            return {}
        reasons: dict[str, str] = await self.placement.ask(pl.WaitReasons(queued))
        return reasons

    async def _visible(self, job_id: str, org_id: str | None) -> dict[str, Any]:
        row = await repo.get_row(self.store, job_id, org_id)
        if row is None:
            raise not_found("job")
        return row


def _body_hash(body: SubmitJobBody) -> str:
    """Fingerprint of what was asked (whitespace and key order do not matter)."""
    return hashlib.sha256(canonical_json(body.model_dump(mode="json")).encode()).hexdigest()
