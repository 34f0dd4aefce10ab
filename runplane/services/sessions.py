"""The sessions service: what the session routes call (``docs/sessions.md``).

``create`` checks the pod (400: its services' needs form no valid DAG; 422: a service's
stack is unknown or unavailable, or a service has nothing to run), resolves each service
(the stack's default command when it gives none, the stack's config defaults as
``RUNPLANE_CONFIG_*``, ``image`` over the stack's, resolved to a digest:
docs/containers.md), then submits ONE ``mode=session`` job carrying the pod, sized for the
sum of its services, through the admission gate (429 over the quota) with the session's
row written in the job's own insert transaction; then it starts the session's actor.
``delete`` stops it (the pod job cancelled and torn down on its node); ``keepalive``
refreshes it (409 when it is not live), ``keepalive_many`` refreshes many at once, and
``driving`` wraps a stream connection that keeps its session alive while it is open. A
keepalive is kept in the session's actor and written in batches by the keepalive log
(``runplane/actors/keepalives.py``); views overlay the values not written yet.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import replace
from typing import Any

from runplane.actors.keepalives import (
    KEEPALIVE_FLUSH_SEC,
    LAZY_FROM_TTL_SEC,
    KeepaliveLog,
    KeepaliveMsg,
    Kept,
    LatestKeepalives,
)
from runplane.actors.session import (
    SESSIONS,
    KeepaliveAsk,
    SessionActor,
    SessionDeps,
    StopAsk,
    Sync,
    now_ms,
)
from runplane.ids import is_id, new_id
from runplane.jobs.jobspec import ContainerImage
from runplane.jobs.spec import SubmitJobBody
from runplane.jobs.transitions import JobTransitioned, Transitions
from runplane.persistence import Store
from runplane.problems import FieldProblem, Problem, not_found
from runplane.runtime import ActorError, ActorKind, Registry
from runplane.services.jobs import Jobs, Submitter
from runplane.sessions import repo
from runplane.sessions.body import KEEPALIVE_BATCH_MAX, PodService, SessionBody, check_pod
from runplane.sessions.drivers import Drivers
from runplane.sessions.machine import JobPhase, SessionState
from runplane.sessions.view import session_view
from runplane.settings import Settings
from runplane.stacks import Catalog, Stack, config_env, validate_config

log = logging.getLogger("runplane.sessions")

#: A stopped or failed session's actor idle this long is passivated.
SESSION_IDLE_SEC = 30.0
#: The stack a pod job runs under when no service names one that allows sessions.
POD_STACK = "shell"
#: The keepalive log: one registry actor of its own kind (beside the session actors),
#: activated by ``Sessions.recover`` or the first lazy keepalive.
KEEPALIVES = ActorKind[KeepaliveMsg]("keepalives")
KEEPALIVES_ID = "all"


class Sessions:
    def __init__(
        self,
        store: Store,
        jobs: Jobs,
        registry: Registry,
        catalog: Catalog,
        settings: Settings,
    ) -> None:
        self.store = store
        #: the stream connections open now that keep their sessions alive
        self.drivers = Drivers()
        self.jobs = jobs
        self.registry = registry
        self.catalog = catalog
        self.settings = settings
        #: resolves a service's image (the images service's ``container``: asked, org,
        #: the field that names it, where it came from), set by the root
        self.resolve_image: Callable[[str, str, str, str], Awaitable[ContainerImage]] | None = None

    def register(self, transitions: Transitions) -> None:
        """The session actors, and their pod jobs' transitions told to them."""
        transitions.subscribe(self.job_changed)

        async def cancel_job(job_id: str) -> None:
            await self.jobs.cancel(job_id, None)

        deps = SessionDeps(
            store=self.store,
            cancel_job=cancel_job,
            kept=self._kept,
            drivers=self.drivers,
            lazy_from_ttl_sec=LAZY_FROM_TTL_SEC,
        )

        async def activate(session_id: str) -> SessionActor:
            row = await repo.get(self.store, session_id, None)
            if row is None:
                raise LookupError(f"session {session_id} has no row")
            return SessionActor(deps, row)

        async def activate_log(_: str) -> KeepaliveLog:
            return KeepaliveLog(self.store, KEEPALIVE_FLUSH_SEC)

        self.registry.register(SESSIONS, activate, idle_timeout=SESSION_IDLE_SEC)
        self.registry.register(KEEPALIVES, activate_log, idle_timeout=None, mailbox_capacity=4096)

    async def _kept(self, session_id: str, at_ms: int) -> None:
        """Hand a keepalive to the keepalive log: no write, and no scheduling point while
        its mailbox has room. Dropped while the server stops (the log has flushed by
        then; the session actor's own stop writes nothing newer: the next start reads
        the row, at most one period old)."""
        try:
            ref = await self.registry.get(KEEPALIVES, KEEPALIVES_ID)
            await ref.tell_now(Kept(session_id, at_ms))
        except ActorError:
            pass

    async def latest_keepalives(self) -> dict[str, int]:
        """The keepalives the log has not written yet (session id -> unix ms); empty if it
        is not running or does not answer within a second (the rows' values then)."""
        if not self.registry.active(KEEPALIVES, KEEPALIVES_ID):
            return {}
        try:
            return await self.registry.ask(
                KEEPALIVES, KEEPALIVES_ID, LatestKeepalives(), timeout=1.0
            )
        except ActorError:
            return {}

    async def recover(self) -> int:
        """At start-up: every session not ended gets its actor back, its deadlines computed
        from the stored last keepalive (one that passed while the server was down reaps
        it at once)."""
        await self.registry.get(KEEPALIVES, KEEPALIVES_ID)  # its flush timer runs from now
        ids = await repo.live_ids(self.store)
        for session_id in ids:
            await self.registry.get(SESSIONS, session_id)
        return len(ids)

    async def job_changed(self, moved: JobTransitioned) -> None:
        """The pod job's phase changed (a job transitions' subscriber): tell the session's
        actor. Lost (the server stopping) it is read back from the job when the actor
        starts."""
        row = moved.row
        if not moved.changed or row.session_id is None:
            return
        told = JobPhase(moved.phase.value, now_ms(), moved.error)
        try:
            await self.registry.tell(SESSIONS, row.session_id, told)
        except (ActorError, LookupError) as exc:
            log.warning(
                "pod job phase not told to its session (read back when it starts)",
                extra={"session_id": row.session_id, "job_id": row.id, "error": str(exc)},
            )

    # -- commands -------------------------------------------------------------------------

    async def create(self, body: SessionBody, who: Submitter) -> dict[str, Any]:
        order = check_pod(body.pod)
        services = [body.pod.services[i] for i in order]
        resolved = [self._resolve(i, s) for i, s in enumerate(body.pod.services)]
        for i, service in enumerate(body.pod.services):
            await self._resolve_image(i, service, resolved[i], who.org_id)
        by_name = {r["name"]: r for r in resolved}
        pod = [by_name[s.name]["run"] for s in services]
        stacks = [self.catalog.get(s.stack) for s in services if s.stack]
        job_stack = next((st.name for st in stacks if st and "session" in st.modes), POD_STACK)
        job_body = SubmitJobBody.model_validate(
            {
                "stack": job_stack,
                "command": ["runplane-pod", *(s.name for s in services)],
                "mode": "session",
                "project": body.project,
                "limits": {
                    "cpu_cores": sum(s.cpu_cores for s in services) or None,
                    "ram_gb": sum(s.ram_gb for s in services) or None,
                    "gpu_count": sum(s.gpu_count for s in services) or None,
                },
            }
        )
        new = repo.NewSession(
            id=new_id("ses_"),
            org_id=who.org_id,
            project=body.project,
            name=body.name,
            submitted_by=who.subject,
            idle_ttl_sec=body.idle_ttl_sec or self.settings.session_idle_ttl_sec,
            services=[by_name[s.name]["view"] for s in body.pod.services],
            actions=list(body.actions),
            teleop_stream=body.teleop_stream,
        )
        await self.jobs.submit(
            job_body,
            who,
            audit=lambda row: repo.insert_sql(new, row.id),
            session_id=new.id,
            pod=pod,
        )
        await self.registry.get(SESSIONS, new.id)
        return await self.view(new.id, None)

    def _resolve(self, i: int, service: PodService) -> dict[str, Any]:
        """What runs for one service (``run``) and what the view shows (``view``); a 422
        naming the service when its stack cannot be used or it has nothing to run."""
        key = f"pod.services[{i}]"
        stack: Stack | None = None
        env: dict[str, str] = {}
        if service.stack:
            stack = self.catalog.get(service.stack)
            if stack is None or stack.unavailable:
                what = "unknown" if stack is None else "unavailable"
                message = f"service {service.name!r}: stack {service.stack!r} is {what}"
                code = "unknown_stack" if stack is None else "stack_unavailable"
                raise Problem(
                    422,
                    code,
                    message + "; GET /v1/stacks lists the catalog",
                    [FieldProblem(f"{key}.stack", code, message)],
                )
            defaults = validate_config(stack, {}).resolved
            env = config_env(defaults) if defaults else {}
        command = list(service.command or (stack.default_command if stack else []))
        if not command:
            message = f"service {service.name!r} has no command (and no stack that gives one)"
            raise Problem(
                422, "no_command", message, [FieldProblem(f"{key}.command", "missing", message)]
            )
        health = service.health.model_dump() if service.health else None
        return {
            "name": service.name,
            "run": {
                "name": service.name,
                "command": command,
                "env": {**env, **service.env},
                "needs": list(service.needs),
                "health": health,
            },
            "view": {
                "name": service.name,
                "stack": service.stack or "",
                "image": service.image or (stack.image if stack else ""),
                "needs": list(service.needs),
            },
        }

    async def _resolve_image(
        self, i: int, service: PodService, resolved: dict[str, Any], org_id: str
    ) -> None:
        """Resolve the service's image to a digest (its own always; its stack's with
        ``RUNPLANE_STACK_IMAGES=resolve``): the service then runs in it, and the session's
        view shows the digest. A 422/503 naming ``pod.services[i].image`` otherwise."""
        stack = self.catalog.get(service.stack) if service.stack else None
        asked, source = service.image, "job"
        if asked is None and stack is not None and self.settings.stack_images == "resolve":
            asked, source = stack.image or None, "stack"
        if asked is None or self.resolve_image is None:
            return
        key = f"pod.services[{i}].image"
        found = await self.resolve_image(asked, org_id, key, source)
        resolved["run"]["container"] = found.model_dump(mode="json")
        resolved["view"]["image"] = found.ref

    async def delete(self, session_id: str, org_id: str | None) -> dict[str, Any]:
        row = await self._visible(session_id, org_id)
        if await self.registry.ask(SESSIONS, session_id, StopAsk()):
            await self.jobs.cancel(row.job_id, None)
        await self.registry.ask(SESSIONS, session_id, Sync())  # the job's end is in
        return await self.view(session_id, None)

    async def keepalive(self, session_id: str, org_id: str | None) -> dict[str, Any]:
        row = await self._visible(session_id, org_id)
        answer = await self.registry.ask(SESSIONS, session_id, KeepaliveAsk())
        if isinstance(answer, str):
            raise Problem(409, "not_live", f"{answer}; start a new session")
        return session_view(replace(row, state=answer), detail=True)

    async def keepalive_many(self, ids: Sequence[str], org_id: str | None) -> dict[str, Any]:
        """``POST /v1/sessions/keepalive``: each of ``ids`` (distinct, checked) kept alive
        when it is live; unknown and other orgs' ids are ``not_found`` alike."""
        rows = {r.id: r for r in await repo.visible_ids(self.store, ids, org_id)}
        kept: list[dict[str, Any]] = []
        not_found: list[str] = []
        not_live: list[str] = []
        for session_id in ids:
            row = rows.get(session_id)
            if row is None:
                not_found.append(session_id)
                continue
            answer: str | SessionState = f"the session is {row.state.phase.value}"
            if row.state.phase.live:  # an ended one has no actor to wake
                answer = await self.registry.ask(SESSIONS, session_id, KeepaliveAsk())
            if isinstance(answer, str):
                not_live.append(session_id)
                continue
            view = session_view(replace(row, state=answer))
            kept.append({k: view[k] for k in ("id", "phase", "last_keepalive")})
        return {"sessions": kept, "not_found": not_found, "not_live": not_live}

    async def driving(self, session_id: str, frames: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """``frames`` (a stream connection of the session's pod job by a caller who may
        drive it) passed through; the session counts as kept alive while they flow."""
        answer: str | SessionState | None = None
        with contextlib.suppress(ActorError, LookupError):
            answer = await self.registry.ask(SESSIONS, session_id, KeepaliveAsk())
        if not isinstance(answer, SessionState):  # not live: nothing to keep
            async for frame in frames:
                yield frame
            return
        self.drivers.opened(session_id)  # (no await since the answer: nothing missed)
        try:
            async for frame in frames:
                yield frame
        finally:
            self.drivers.closed(session_id, now_ms())  # no await: may run cancelled

    # -- reads ----------------------------------------------------------------------------

    async def view(self, session_id: str, org_id: str | None) -> dict[str, Any]:
        row = await self._visible(session_id, org_id)
        pending = (await self.latest_keepalives()).get(session_id)
        return session_view(_overlaid(row, pending), detail=True)

    async def list(self, org_id: str | None, *, limit: int, offset: int) -> list[dict[str, Any]]:
        rows = await repo.list_rows(self.store, org_id, limit=limit, offset=offset)
        pending = await self.latest_keepalives() if rows else {}
        return [session_view(_overlaid(r, pending.get(r.id))) for r in rows]

    async def _visible(self, session_id: str, org_id: str | None) -> repo.SessionRow:
        row = await repo.get(self.store, session_id, org_id)
        if row is None:
            raise not_found("session")
        return row


def _overlaid(row: repo.SessionRow, pending: int | None) -> repo.SessionRow:
    """The row with a keepalive the log has not written yet."""
    if pending is None or pending <= row.state.last_keepalive:
        return row
    return replace(row, state=replace(row.state, last_keepalive=pending))


def batch_ids(ids: Sequence[str]) -> list[str]:
    """A batch keepalive's distinct ids in their order; a 422 naming ``ids`` when there are
    too many, or ``ids[i]`` for one that is not a session id."""
    if len(ids) > KEEPALIVE_BATCH_MAX:
        message = f"at most {KEEPALIVE_BATCH_MAX} ids per request; got {len(ids)}"
        raise Problem(422, "too_many", message, [FieldProblem("ids", "too_many", message)])
    for i, value in enumerate(ids):
        if not is_id(value, "ses_"):
            message = f"{value[:80]!r} is not a session id (ses_ + 26 base32 characters)"
            raise Problem(422, "bad_id", message, [FieldProblem(f"ids[{i}]", "bad_id", message)])
    return list(dict.fromkeys(ids))
