"""The agent's lifecycle: draining (``runplane agent`` on SIGTERM: no new work, running
jobs finish or are handed back, then the agent stops) and self-update (the server offers
a version; it is installed while jobs run, then the agent drains and stops to be
re-executed). See ``docs/agent.md`` (Draining, Self-update).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import trio
import trio_websocket

from runplane import __version__
from runplane.agent import update as updates
from runplane.agent.core import Connection, Core, Drain
from runplane.agent.protocol import (
    CLOSE_PROTOCOL_ERROR,
    Draining,
    JobLogs,
    JobReleased,
    Update,
    UpdateStatus,
    encode,
)

log = logging.getLogger("runplane.agent")

#: What ``draining`` says for a drain without a deadline (a self-update's, by default).
NO_DEADLINE_SEC = 1e9


class Lifecycle:
    """Drain and self-update of one agent; ``nursery`` is set while the agent serves."""

    def __init__(
        self,
        core: Core,
        *,
        request_stop: Callable[[], None],
        drain_timeout: float,
        auto_update: bool,
        self_update: bool,
        update_plan: updates.UpdatePlan | None,
        update_drain_timeout: float,
    ) -> None:
        self.core = core
        self.request_stop = request_stop
        self.drain_timeout = drain_timeout
        self.auto_update = auto_update
        self.self_update = self_update
        self.update_plan = update_plan
        self.update_drain_timeout = update_drain_timeout
        self.nursery: trio.Nursery | None = None
        #: the version installed by a self-update: the agent stopped to be re-executed
        self.restart_into: str | None = None
        self._updating: trio.CancelScope | None = None
        #: the last word on a self-update, said again to every new session
        self.update_report: UpdateStatus | None = None
        self._next_update: Update | None = None
        self._failed_updates: set[str] = set()

    def serving(self, nursery: trio.Nursery) -> None:
        """The agent serves now: a drain asked for before starts."""
        self.nursery = nursery
        if self.core.drain is not None:
            nursery.start_soon(self._drain_jobs, self.core.drain)

    def abandon_update(self) -> None:
        """An install in progress is abandoned (not applied): the agent stops."""
        if self._updating is not None:
            self._updating.cancel()

    # -- draining

    def drain(self, timeout: float | None = None) -> None:
        """Stop gracefully without cancelling jobs: take no new work (the server is told
        ``draining``; a ``run`` arriving now is handed back at once), let the running jobs
        finish for up to ``timeout`` seconds (default ``drain_timeout``; 0: not at all),
        then stop the ones left (SIGTERM, SIGKILL after ``grace_sec``, as a cancel) and
        hand them back (``job_released``: the server requeues them), then stop as
        :meth:`request_stop` does (``run()`` returns). Jobs that end meanwhile report their
        real outcome. A second call hands the running jobs back at once."""
        drain = self.core.drain
        if drain is not None:
            drain.now.set()
            self.core.notify()
            return
        wait = self.drain_timeout if timeout is None else timeout
        if not wait >= 0:
            raise ValueError(f"drain timeout must be 0 or more seconds, got {wait}")
        self.core.drain = drain = Drain(wait, trio.current_time() + wait)
        if self.nursery is not None:
            self.nursery.start_soon(self._drain_jobs, drain)
        self.core.notify()

    async def _drain_jobs(self, drain: Drain) -> None:
        """Wait for the running jobs until the deadline, hand back those left, then stop."""
        log.info(
            "draining",
            extra={
                # None: no deadline (a self-update's drain, by default)
                "drain_timeout_sec": drain.timeout if math.isfinite(drain.timeout) else None,
                "running": [list(k) for k in self.core.jobs],
            },
        )
        with trio.move_on_at(drain.deadline):
            await self.core.wait_until(lambda: not self.core.jobs or drain.now.is_set())
        if self.core.jobs:
            why = (
                "stop requested again"
                if drain.now.is_set()
                else f"drain timeout of {drain.timeout:g} s passed"
            )
            log.warning(
                "handing back running jobs",
                extra={"reason": why, "jobs": [list(k) for k in self.core.jobs]},
            )
            for job in list(self.core.jobs.values()):
                if job.handed_back or job.finished:  # a finished one reports its outcome
                    continue
                job.handed_back = True
                note = f"agent shutting down ({why}): stopping this attempt to hand it back"
                self.core.outbox.put(
                    JobLogs(job_id=job.job_id, attempt=job.attempt, lines=[("system", note)])
                )
                job.cancel.set()
            self.core.notify()
            await self.core.wait_until(lambda: not self.core.jobs)
        log.info("drained")
        self.request_stop()

    def hand_back(self, job_id: str, attempt: int) -> None:
        """Tell the server this attempt was stopped by the drain (it requeues the job)."""
        fields = {"job_id": job_id, "attempt": attempt}
        if self.core.drain is not None and not self.core.drain.server_drains:
            log.warning(
                "job handed back without telling the server (it does not know draining): "
                "it requeues the attempt when it declares this node lost",
                extra=fields,
            )
            return
        log.info("job handed back", extra=fields)
        self.core.outbox.put(JobReleased(job_id=job_id, attempt=attempt))
        self.core.notify()

    # -- draining, on the wire

    async def drain_notice(self, session: Connection) -> None:
        """Say ``draining`` on this connection once a drain started (again after a
        reconnect: a new session is placeable until it does)."""
        while self.core.drain is None:
            await self.core.changed.wait()
        drain = self.core.drain
        if not drain.server_drains:
            return
        left = 0.0 if drain.now.is_set() else max(0.0, drain.deadline - trio.current_time())
        left = min(left, NO_DEADLINE_SEC)  # a drain without a deadline (self-update)
        await session.ws.send_message(encode(Draining(deadline_sec=round(left, 3))))
        session.draining_sent = True

    def check_drain_refused(self, session: Connection) -> None:
        """A server older than ``draining`` closes the session with 4400 when it gets one:
        then drain without telling it (no ``draining``, no ``job_released``)."""
        drain, exc = self.core.drain, session.failure
        if (
            drain is None
            or not drain.server_drains
            or not session.draining_sent
            or not isinstance(exc, trio_websocket.ConnectionClosed)
            or exc.reason is None
            or exc.reason.code != CLOSE_PROTOCOL_ERROR
        ):
            return
        drain.server_drains = False
        dropped = self.core.outbox.drop_released()
        log.warning(
            "the server does not know draining (an older server): draining without it; "
            "jobs still running at the deadline are stopped and left for the server to "
            "requeue when it declares this node lost",
            extra={"close_reason": exc.reason.reason, "dropped_releases": dropped},
        )

    # -- self-update

    def on_update(self, msg: Update) -> None:
        fields = {"version": msg.version, "current": __version__, "requested": msg.requested}
        if msg.version == __version__:
            log.info("update offered: already running that version", extra=fields)
        elif not (msg.requested or self.auto_update):
            log.info("update offered, not applied: auto-update is off", extra=fields)
        elif not self.self_update:
            log.warning(
                "update offered, not applied: this agent does not update itself", extra=fields
            )
            why = "the local agent of `runplane serve` updates with the server, not by itself"
            self._report_update(UpdateStatus(version=msg.version, phase="failed", error=why))
        elif self.core.drain is not None or self.core.stop.is_set():
            log.info("update offered, not applied: the agent is stopping", extra=fields)
        elif self._updating is not None:
            # the latest offer waits for the install in progress (tried if that one fails)
            log.info("update offered while installing another: next", extra=fields)
            self._next_update = msg
        elif msg.version in self._failed_updates and not msg.requested:
            log.info("update offered, not applied: it failed before", extra=fields)
        elif self.nursery is not None:
            self._updating = trio.CancelScope()
            self.nursery.start_soon(self._self_update, msg.version, self._updating)

    def _report_update(self, status: UpdateStatus) -> None:
        self.update_report = status
        self.core.outbox.put_control(status)
        self.core.notify()

    async def _self_update(self, version: str, scope: trio.CancelScope) -> None:
        """Install ``version`` while the jobs run; if it took, drain and stop for a re-exec;
        if not, say why and keep running as before."""
        log.info("self-update: installing", extra={"version": version, "from": __version__})
        self._report_update(UpdateStatus(version=version, phase="installing"))
        result: updates.Installed | None = None
        with scope:
            assert self.update_plan is not None  # (self_update: set in __init__)
            result = await updates.install(self.update_plan, version)
        self._updating = None
        if result is None:
            return  # the agent is stopping
        if not result.ok:
            self._failed_updates.add(version)
            log.error("self-update failed", extra={"version": version, "error": result.error})
            self._report_update(UpdateStatus(version=version, phase="failed", error=result.error))
            following, self._next_update = self._next_update, None
            if following is not None and following.version != version:
                self.on_update(following)
            return
        self._report_update(UpdateStatus(version=version, phase="installed"))
        log.info(
            "self-update installed: draining, then restarting",
            extra={"version": version, "running": [list(k) for k in self.core.jobs]},
        )
        self.restart_into = version
        self.drain(self.update_drain_timeout)
