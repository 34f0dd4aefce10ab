"""A session's pod on the node: every service of the pod a process group of the pod's job,
in the job's working directory (the pod directory), started in ``needs`` order.

- A service starts once every service it needs is **up**: started, and past its health
  gate when it has one (its ``health.command`` run in the pod every ``period_sec``, each
  try stopped after ``timeout_sec``, until it exits 0; more than ``retries`` failed tries
  fail the pod, naming the service and the gate's last output).
- Once every service is up the job is reported ``running`` (the session is ``ready``).
- Services reach each other on localhost; each gets ``RUNPLANE_SERVICE_NAME``,
  ``RUNPLANE_POD_DIR`` (the working directory they share) and the job's
  ``RUNPLANE_STREAMS_DIR`` (teleop frames arrive there), on top of the job's environment
  and its own ``env``. Each line a service writes carries its name.
- A service that exits (whatever its code) or cannot start fails the pod: the others are
  stopped (SIGTERM, then SIGKILL after the grace period, every group at once) and the job
  ends ``failed`` with the service's name in its error. A cancel (the session stopped) or
  the job's timeout stop every service the same way.

Health commands run directly as the job's user, not inside a sandbox wrapper.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal

import trio

from runplane.agent.execspec import Finished, PodHealth, PodService, Started
from runplane.agent.output import shown
from runplane.agent.procgroup import signal_name

if TYPE_CHECKING:
    from runplane.agent.executor import _Job

SERVICE_ENV = "RUNPLANE_SERVICE_NAME"
POD_DIR_ENV = "RUNPLANE_POD_DIR"
#: Characters of a health gate's last output an error quotes.
HEALTH_OUTPUT_CHARS = 300


async def run_pod(job: _Job) -> Finished:
    return await _Pod(job).run()


def _order(services: Sequence[PodService]) -> list[PodService]:
    """Services after everything they need (the server checked the needs form a DAG)."""
    done: set[str] = set()
    out: list[PodService] = []
    left = list(services)
    while left:
        ready = [s for s in left if all(n in done for n in s.needs)]
        if not ready:  # pragma: no cover - refused by the server before it runs
            raise ValueError("the pod's needs form a cycle")
        for s in ready:
            out.append(s)
            done.add(s.name)
            left.remove(s)
    return out


class _Pod:
    def __init__(self, job: _Job) -> None:
        self.job = job
        self.services = _order(job.spec.pod)
        self.up = {s.name: trio.Event() for s in self.services}
        #: set when the pod must stop: a cancel, the timeout, or a failure
        self.stop = trio.Event()
        self.failure: str | None = None
        self.reason: Literal["cancelled", "timeout"] | None = None
        self.pids: dict[str, int] = {}

    def _fail(self, error: str) -> None:
        if self.failure is None and self.reason is None:
            self.failure = error
        self.stop.set()

    async def run(self) -> Finished:
        job = self.job
        names = ", ".join(
            s.name + (f" (needs {', '.join(s.needs)})" if s.needs else "") for s in self.services
        )
        await job._system(f"pod of {len(self.services)} services: {names}")
        async with trio.open_nursery() as outer:
            outer.start_soon(self._watch)
            outer.start_soon(self._ready)
            async with trio.open_nursery() as services:
                for service in self.services:
                    services.start_soon(self._service, service)
            outer.cancel_scope.cancel()
        if self.failure is not None:
            return await job._finish("failed", None, self.failure, self.failure)
        if self.reason == "timeout":
            error = f"timed out after {job.spec.timeout_sec:g} s"
            return await job._finish("timeout", None, error, error + "; every service stopped")
        return await job._finish("cancelled", None, "cancelled", "cancelled; every service stopped")

    async def _watch(self) -> None:
        job = self.job
        with trio.move_on_at(job.deadline):
            if job.cancel is None:
                await trio.sleep_forever()
            await job.cancel.wait()
            if self.failure is None and self.reason is None:
                self.reason = "cancelled"
            self.stop.set()
            return
        if self.failure is None and self.reason is None:
            self.reason = "timeout"
        self.stop.set()

    async def _ready(self) -> None:
        for service in self.services:
            if not await self._either(self.up[service.name]):
                return
        first = self.services[0].name
        await self.job._system(f"pod ready: all {len(self.services)} services up")
        await self.job.out.send(Started(pid=self.pids[first], stage="command", ready=True))

    async def _either(self, event: trio.Event) -> bool:
        """Wait for ``event`` or the pod's stop; True when ``event`` came first."""
        if not event.is_set() and not self.stop.is_set():
            async with trio.open_nursery() as race:

                async def wait(e: trio.Event) -> None:
                    await e.wait()
                    race.cancel_scope.cancel()

                race.start_soon(wait, event)
                race.start_soon(wait, self.stop)
        return event.is_set() and not self.stop.is_set()

    async def _service(self, service: PodService) -> None:
        job = self.job
        for need in service.needs:
            if not await self._either(self.up[need]):
                return
        env = {
            **job.env,
            **service.env,
            SERVICE_ENV: service.name,
            POD_DIR_ENV: str(job.workdir),
        }
        started = trio.Event()

        def on_start(pid: int) -> None:
            self.pids[service.name] = pid
            started.set()
            if service.health is None:
                self.up[service.name].set()

        command = shlex.join(service.command)
        label = f"service {service.name}: running: {shown(command, job.spec.job_id, 'pod')}"
        async with trio.open_nursery() as gate:
            if service.health is not None:
                gate.start_soon(self._health, service, service.health, env, started)
            result = await job._run_process(
                list(service.command),
                "command",
                label,
                service=service.name,
                env=env,
                stop=self.stop,
                started=on_start,
            )
            gate.cancel_scope.cancel()
        if result.start_error is not None:
            self._fail(f"service {service.name!r} could not start: {result.start_error}")
        elif result.stopped is None and not self.stop.is_set():
            code = result.returncode
            how = f"exit code {code}"
            if code is not None and code < 0:
                how = f"killed by signal {signal_name(-code)}"
            self._fail(f"service {service.name!r} exited ({how})")

    async def _health(
        self, service: PodService, health: PodHealth, env: dict[str, str], started: trio.Event
    ) -> None:
        await started.wait()
        job = self.job
        failures = 0
        while not self.stop.is_set():
            ok, output = await self._probe(health, env)
            if ok:
                self.up[service.name].set()
                await job._system(
                    f"service {service.name} is up: health check passed"
                    f" (after {failures} failed tr{'y' if failures == 1 else 'ies'})"
                )
                return
            failures += 1
            if failures > health.retries:
                self._fail(
                    f"service {service.name!r}: health check failed {failures} times"
                    f" ({shlex.join(health.command)}); last output: {output or '(none)'}"
                )
                return
            await trio.sleep(health.period_sec)

    async def _probe(self, health: PodHealth, env: dict[str, str]) -> tuple[bool, str]:
        job = self.job
        try:
            with trio.move_on_after(health.timeout_sec) as scope:
                done = await trio.run_process(
                    health.command,
                    cwd=job.workdir,
                    env=env,
                    stdin=b"",
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                    **job.identity,
                )
        except OSError as exc:
            return False, f"cannot run it: {exc.strerror or exc}"
        if scope.cancelled_caught:
            return False, f"timed out after {health.timeout_sec:g} s"
        text = (done.stdout + done.stderr).decode(errors="replace").strip()
        tail = text[-HEALTH_OUTPUT_CHARS:]
        if done.returncode == 0:
            return True, tail
        return False, f"exit code {done.returncode}" + (f": {tail}" if tail else "")
