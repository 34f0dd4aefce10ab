"""The job runner: each ``run`` the server sends becomes an attempt on this node, taken
through plan -> prepare -> execute -> outputs -> finish (``docs/agent.md``):

* **plan** (``jobplan.py``): its limits checked against what the node enforces, its GPUs
  assigned (waiting a while for devices an ending job still holds), its launch;
* **prepare**: its uid taken (``uids.py``), its workdir and streams directory made, its
  images pulled and pinned until it ends (``images/``, a container node) and its mounts
  put in place (``workspace.py``): phase ``pulling`` (``pulling.py``);
* **execute**: :func:`~runplane.agent.executor.run_job`, its events reported as
  ``job_phase``/``job_logs``/``job_metric`` and its streams forwarded (``streams.py``);
* **outputs**: uploaded (``outputs.py``);
* **finish**: ``job_finished`` reported (kept on disk until acknowledged), its uid given
  back once nothing of the job is left.

What it reports goes into the shared outbox (``core.py``); the session sends it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import trio

from runplane.agent.core import Core, Job
from runplane.agent.execspec import note_preempted, pod_services
from runplane.agent.executor import (
    Event,
    ExecSpec,
    Finished,
    LogLines,
    Metric,
    Started,
    run_job,
)
from runplane.agent.fullroot import blame_full_root
from runplane.agent.gang import master_port_refusal
from runplane.agent.images.jobimages import JobImages, image_refusal
from runplane.agent.images.store import ImageStore
from runplane.agent.isolation import HostPaths, JobUser, make_workdir
from runplane.agent.jobplan import Executor, JobPlan, NodeRules
from runplane.agent.jobref import check_job_ref, job_key
from runplane.agent.mask import masked
from runplane.agent.outbox import Queued
from runplane.agent.outputs import collect_outputs
from runplane.agent.protocol import (
    Cancel,
    JobFinished,
    JobLogs,
    JobMetric,
    JobPhase,
    JobReleased,
    Run,
    RunSpec,
    Teleop,
    TeleopAck,
)
from runplane.agent.pulling import pull_and_mount
from runplane.agent.requirements import deps_dir_of
from runplane.agent.streams import append_teleop, forwarding, make_streams_dir, streams_dir_of
from runplane.agent.uid_releases import Releases
from runplane.agent.uids import UidPool
from runplane.agent.urls import http_origin

log = logging.getLogger("runplane.agent")

#: While connected, a job's reporting waits (back-pressure) once this many are queued.
HIGH_WATER_UNITS = 2_000
#: A job placed while its GPUs are still held by an ending job waits the grace period and
#: this long for them before it is handed back (``_plan_waiting``).
GPU_WAIT_EXTRA_SEC = 5.0


class JobRunner:
    """Runs the attempts the server sends, in ``nursery`` (set while the agent serves).
    Who jobs run as and where (``rules``, ``job_user``, ``uids``, ``work_root``,
    ``host_paths``) is settled when the agent starts."""

    def __init__(
        self,
        core: Core,
        *,
        server_url: Callable[[], str],
        hand_back: Callable[[str, int], None],
        grace_sec: float,
        executor: Executor,
        work_root: Path,
    ) -> None:
        self.core = core
        #: the server this agent talks to now (outputs and mounts go there)
        self.server_url = server_url
        #: a run that arrives while draining is handed back (the lifecycle says how)
        self.hand_back = hand_back
        self.grace_sec = grace_sec
        self.executor = executor
        self.work_root = work_root
        self.rules = NodeRules(node=core.name or "")
        self.job_user: JobUser | None = None
        self.uids: UidPool | None = None
        #: the uids given back in batches (``uid_releases.py``)
        self._releases: Releases | None = None
        self.host_paths = HostPaths()
        #: the image cache of a container node (``--executor container``); None: this
        #: node runs no images (an image job is refused)
        self.images: ImageStore | None = None
        self.nursery: trio.Nursery | None = None

    def job_pids(self) -> set[int]:
        """Pids of the job processes the executor started and waits for (not to be reaped)."""
        return {pid for job in self.core.jobs.values() for pid in job.pids}

    # -- the server's orders

    def on_run(self, msg: Run) -> None:
        key = job_key(msg)
        fields = {"job_id": msg.job_id, "attempt": msg.attempt}
        if self.core.stop.is_set() or self.nursery is None:
            log.warning("run ignored: the agent is stopping", extra=fields)
            return
        if key in self.core.jobs:
            log.info("run ignored: this attempt is already running", extra=fields)
            return
        if self.core.outbox.is_unacked(key):
            log.info("run ignored: this attempt already finished", extra=fields)
            return
        if self.core.drain is not None:
            log.info("run not started: the agent is draining", extra=fields)
            self.hand_back(msg.job_id, msg.attempt)
            return
        problem = check_job_ref(msg.job_id, msg.attempt)
        if problem is not None:
            log.warning("run refused", extra={**fields, "error": problem})
            self.core.finish(
                JobFinished(job_id=msg.job_id, attempt=msg.attempt, outcome="failed", error=problem)
            )
            return
        limit = self.core.facts.max_concurrency if self.core.facts is not None else 1
        if len(self.core.jobs) >= limit:
            log.warning(
                "running more jobs than max_concurrency",
                extra={**fields, "running": len(self.core.jobs) + 1, "max_concurrency": limit},
            )
        workdir = self.work_root / msg.job_id / str(msg.attempt)
        job = Job(msg.job_id, msg.attempt, workdir, mask=tuple(msg.spec.mask or ()))
        job.generation = self.core.freeze.look()
        self.core.jobs[key] = job
        self.core.notify()
        self.nursery.start_soon(self._run_job, job, msg.spec)

    def on_cancel(self, msg: Cancel) -> None:
        fields = {"job_id": msg.job_id, "attempt": msg.attempt}
        job = self.core.jobs.get(job_key(msg))
        if job is None:
            log.info("cancel ignored: attempt not running", extra=fields)
            return
        log.info("cancelling job", extra={**fields, "preempted_by": msg.preempted_by})
        if msg.grace_sec is not None:
            job.cancel.grace = float(msg.grace_sec)
        if msg.preempted_by is not None:  # the checkpoint hint, before the SIGTERM
            note_preempted(job.workdir, msg.preempted_by, msg.grace_sec or self.grace_sec)
        job.cancel.set()

    def on_teleop(self, msg: Teleop) -> None:
        """Append the frame to the job's ``.teleop`` file (a small local write, inline, so a
        job's frames stay in order) and answer ``teleop_ack``."""
        job = self.core.jobs.get(job_key(msg))
        error: str | None = None
        if job is None or job.finished:
            error = "attempt not running on this node"
        elif job.streams is None:
            error = "attempt not started yet on this node (its streams directory is not made)"
        else:
            try:
                append_teleop(job.streams, msg, user=job.user)
            except OSError as exc:
                error = f"cannot write {msg.stream}.teleop: {exc.strerror or exc}"
        if error is not None:
            log.info(
                "teleop frame not delivered",
                extra={"job_id": msg.job_id, "attempt": msg.attempt, "error": error},
            )
        ack = TeleopAck(
            job_id=msg.job_id,
            attempt=msg.attempt,
            stream=msg.stream,
            seq=msg.seq,
            ok=error is None,
            error=error,
        )
        self.core.outbox.put_control(ack)
        self.core.notify()

    # -- reporting

    async def _emit(self, job: Job, msg: Queued) -> None:
        self.core.outbox.put(masked(msg, job.mask))
        self.core.notify()
        # Back-pressure while connected; while disconnected the outbox drops the oldest.
        await self.core.wait_until(
            lambda: not self.core.connected or self.core.outbox.units(job.key) <= HIGH_WATER_UNITS
        )

    async def _on_event(self, job: Job, event: Event) -> None:
        ids = {"job_id": job.job_id, "attempt": job.attempt}
        if isinstance(event, Started):
            job.pids.add(event.pid)
            if event.ready and not job.running_sent:
                job.running_sent = True
                await self._emit(
                    job, JobPhase(job_id=job.job_id, attempt=job.attempt, phase="running")
                )
        elif isinstance(event, LogLines):
            await self._emit(
                job, JobLogs(job_id=job.job_id, attempt=job.attempt, lines=list(event.lines))
            )
        elif isinstance(event, Metric):
            await self._emit(
                job,
                JobMetric(
                    job_id=job.job_id, attempt=job.attempt, step=event.step, values=event.values
                ),
            )
        elif isinstance(event, Finished):
            job.finished = True
            if job.handed_back and event.outcome == "cancelled":
                self.hand_back(job.job_id, job.attempt)
                return
            log.info(
                "job finished",
                extra={
                    **ids,
                    "outcome": event.outcome,
                    "exit_code": event.exit_code,
                    "error": event.error,
                    "duration_sec": round(event.duration_sec, 3),
                },
            )
            self.core.finish(
                JobFinished(
                    job_id=job.job_id,
                    attempt=job.attempt,
                    outcome=event.outcome,
                    exit_code=event.exit_code,
                    signal=event.signal,
                    error=event.error,
                    final_metrics=event.final_metrics,
                    artifacts=list(job.artifacts),
                )
            )

    async def _system(self, job: Job, line: str) -> None:
        await self._emit(
            job, JobLogs(job_id=job.job_id, attempt=job.attempt, lines=[("system", line)])
        )

    # -- one attempt

    async def _outputs(self, job: Job, spec: RunSpec, finished: Finished) -> Finished:
        """Upload the run's outputs (not for a cancelled job); a job that succeeded fails
        when a non-optional glob matched nothing or an upload failed."""
        if not spec.outputs or finished.outcome == "cancelled":
            return finished
        refs: list[dict[str, Any]] = []
        error: str | None = None
        async with trio.open_nursery() as nursery:

            async def watch_cancel() -> None:
                await job.cancel.wait()
                nursery.cancel_scope.cancel()

            async def collect() -> None:
                nonlocal refs, error
                refs, error = await collect_outputs(
                    job.workdir,
                    list(spec.outputs),
                    self.server_url(),
                    job.job_id,
                    note=lambda s: self._system(job, s),
                    owner=job.user.uid if job.user is not None else None,
                )
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_cancel)
            nursery.start_soon(collect)
        if job.cancel.is_set():
            return replace(finished, outcome="cancelled", error="cancelled while uploading outputs")
        job.artifacts = refs
        if error is not None and finished.outcome == "succeeded":
            await self._system(job, error)
            return replace(finished, outcome="failed", error=error)
        return finished

    async def _run_job(self, job: Job, spec: RunSpec) -> None:
        """plan -> prepare -> execute -> outputs -> finish; an error of the agent's own
        fails the job (once), and the job's slot, uid and rules are freed in any case."""
        ids = {"job_id": job.job_id, "attempt": job.attempt}
        log.info("job started", extra={**ids, "workdir": str(job.workdir)})
        try:
            plan = await self._admit(job, spec)
            if plan is None:
                return
            async with AsyncExitStack() as pins:  # its images, until it ends
                ready = await self._set_up(job, spec, plan, pins)
                if isinstance(ready, Finished):
                    await self._on_event(job, await self._blame_full_root(ready))
                    return
                if self._stale(job):
                    return
                finished = await self._execute(job, spec, plan, ready)
                finished = await self._outputs(job, spec, finished)
                await self._on_event(job, await self._blame_full_root(finished))
        except Exception as exc:
            log.exception("job failed inside the agent", extra=ids)
            if not job.finished:
                job.finished = True
                failed = Finished("failed", None, f"agent error: {exc}", {}, 0)
                self.core.finish(
                    JobFinished(
                        job_id=job.job_id,
                        attempt=job.attempt,
                        outcome="failed",
                        error=(await self._blame_full_root(failed)).error,
                    )
                )
        finally:
            self.rules.release(job.key)
            del self.core.jobs[job.key]
            self.core.notify()
            await self._free_user(job)

    def _stale(self, job: Job) -> bool:
        """True when the agent was frozen since it accepted ``job`` (``freeze.py``): its
        order is stale (the server requeued it, or will at the hello that no longer lists
        it), so it must not start now; it ends here without a report."""
        if not self.core.freeze.since(job.generation):
            return False
        log.warning(
            "attempt dropped before it started: the agent was frozen",
            extra={"job_id": job.job_id, "attempt": job.attempt},
        )
        return True

    async def _blame_full_root(self, finished: Finished) -> Finished:
        """A job that failed while the work root is full fails for that (fullroot.py); only
        a failed one costs a trip to a worker thread (the root's statvfs)."""
        if finished.outcome != "failed":
            return finished
        node, root = self.core.node_name(), self.work_root
        return await trio.to_thread.run_sync(blame_full_root, finished, node, root)

    async def _admit(self, job: Job, spec: RunSpec) -> JobPlan | None:
        """The job's plan, once it is known to run here: None when it ended instead (handed
        back, cancelled while waiting, refused by isolation or the plan)."""
        plan = await self._plan_waiting(job, spec)
        if plan.hand_back is not None and job.cancel.is_set():
            await self._on_event(job, Finished("cancelled", None, "cancelled", {}, 0))
            return None
        if plan.hand_back is not None:
            log.info(
                "job declined",
                extra={"job_id": job.job_id, "attempt": job.attempt, "reason": plan.hand_back},
            )
            self.core.outbox.put(
                JobReleased(job_id=job.job_id, attempt=job.attempt, declined=plan.hand_back)
            )
            self.core.notify()
            return None
        gpus = [d.id for d in plan.gpus]
        await self._emit(
            job, JobPhase(job_id=job.job_id, attempt=job.attempt, phase="pulling", gpus=gpus)
        )
        refusal = self.rules.isolation_refusal(spec.isolation)
        refusal = refusal or plan.refusal or image_refusal(spec, self.images, self.core.node_name())
        refusal = refusal or master_port_refusal(spec.master_port)
        if refusal is not None:
            await self._system(job, refusal)
            await self._on_event(job, Finished("failed", None, refusal, {}, 0))
            return None
        if gpus:
            await self._system(job, f"GPUs assigned: {', '.join(gpus)}")
        for note in plan.notes:
            await self._system(job, note)
        return plan

    async def _set_up(
        self, job: Job, spec: RunSpec, plan: JobPlan, pins: AsyncExitStack
    ) -> Finished | JobImages:
        """The attempt's user, working and streams directories, then its images (held by
        ``pins``) and mounts (``pulling.py``); a Finished when that failed."""
        job.user, job.streams = await trio.to_thread.run_sync(self._user_and_dirs, job)
        if self.uids is not None and plan.launch is not None:
            plan.launch = replace(plan.launch, user=job.user)
        return await pull_and_mount(
            job,
            spec,
            images=self.images,
            pins=pins,
            note=lambda s: self._system(job, s),
            host_paths=self.host_paths,
            server=http_origin(self.server_url()),
        )

    async def _execute(self, job: Job, spec: RunSpec, plan: JobPlan, ready: JobImages) -> Finished:
        """Run the command (the executor), its streams forwarded meanwhile; events but the
        end are reported as they come, the end is returned (the outputs go up first)."""
        exec_spec = ExecSpec(
            job_id=job.job_id,
            command=list(spec.command),
            env={**spec.env, **plan.env},
            workdir=job.workdir,
            setup=spec.setup,
            timeout_sec=spec.timeout_sec,
            # inline mounts were written while pulling (with their mode); the bare
            # inline_files of older servers are still written by the executor
            inline_files={} if (spec.workspace or spec.inputs) else dict(spec.inline_files),
            grace_sec=self.grace_sec,
            user=job.user,
            launch=plan.launch,
            streams_dir=job.streams,
            pod=pod_services(spec.pod, ready.services),
            image=ready.image,
            isolation=spec.isolation,
        )

        async def report(event: Event) -> None:
            if not isinstance(event, Finished):
                await self._on_event(job, event)

        assert job.streams is not None, "made by _set_up"
        async with forwarding(
            job.streams,
            lambda msg: self._emit(job, msg),
            job_id=job.job_id,
            attempt=job.attempt,
            note=lambda s: self._system(job, s),
            owner=job.user.uid if job.user is not None else None,
        ):
            return await run_job(exec_spec, report, job.cancel)

    async def _plan_waiting(self, job: Job, spec: RunSpec) -> JobPlan:
        """:meth:`_plan`, waiting a while for GPUs still held by a job that is ending: the
        server frees a cancelled job's reservation at once, the agent its devices once its
        processes are gone (up to the grace period later). Still none free after that:
        the plan says to hand the job back."""
        plan = self._plan(job, spec)
        if plan.hand_back is None:
            return plan
        with trio.move_on_after(self.grace_sec + GPU_WAIT_EXTRA_SEC):
            while plan.hand_back is not None and not job.cancel.is_set():
                await self.core.changed.wait()
                plan = self._plan(job, spec)
        return plan

    def _plan(self, job: Job, spec: RunSpec) -> JobPlan:
        """Limits, GPUs and the launch of this attempt (``jobplan.py``)."""
        read_only = tuple(
            job.workdir / m.path
            for m in (spec.workspace, *spec.inputs)
            if m and m.mode == "ro" and m.path
        )
        return self.rules.plan(job.key, spec.limits, read_only)

    def _user_and_dirs(self, job: Job) -> tuple[JobUser | None, Path]:
        """The attempt's user, workdir and streams directory (blocking: one trip to a
        worker thread for the three, as each trip costs a wake-up of the event loop, which
        the in-process agent shares with the server); the user and the streams path."""
        user = self._attempt_user(job)
        make_workdir(job.workdir, self.work_root)
        return user, make_streams_dir(job.workdir, user)

    def _attempt_user(self, job: Job) -> JobUser | None:
        """Who the attempt's processes run as: a uid of its own (held until
        :meth:`_free_user`), or the one user of every job (blocking)."""
        if self.uids is None:
            return self.job_user
        user = self.uids.take_clean(job.key)  # the usual case: a uid given back swept
        if user is None:
            user = self.uids.take(job.key)
        log.info(
            "job uid taken", extra={"job_id": job.job_id, "attempt": job.attempt, "uid": user.uid}
        )
        return user

    async def _free_user(self, job: Job) -> None:
        """Give the attempt's uid back once its every process is gone; its directories
        are handed back to the agent first (``uids.py``). Shielded: an agent stopping at
        once still frees it (what a killed agent leaves is swept at its next start)."""
        pool = self.uids
        if pool is None or pool.uid_of(job.key) is None:
            return
        own = [job.workdir, deps_dir_of(job.workdir), streams_dir_of(job.workdir)]
        if self._releases is None or self._releases.pool is not pool:
            self._releases = Releases(pool)
        with trio.CancelScope(shield=True):
            released = await self._releases.release(job.key, own)
        if released is not None and (released.killed or released.handed_back or released.removed):
            log.info(
                "job uid swept",
                extra={
                    "job_id": job.job_id,
                    "attempt": job.attempt,
                    "uid": released.uid,
                    "killed_processes": released.killed,
                    "handed_back_files": released.handed_back,
                    "removed_ipc": released.removed,
                },
            )
