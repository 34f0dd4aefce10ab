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

Health commands run directly as the job's user, not inside a sandbox wrapper; in a pod of
images, inside the service's image.

**Pods of images** (``docs/containers.md``): each service runs in its own image (its
``image``, else the job's), ``RUNPLANE_POD_DIR`` is ``/work``. The services share one
network namespace: the node's when the job has network (as the process executor's
services do), else one of the pod's own with loopback only, held by a bubblewrap process
(``sleep infinity``) that every service joins (``nsenter``) and that ends with the pod.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Literal

import trio

from runplane.agent.execspec import (
    CONTAINER_WORKDIR,
    Finished,
    PodHealth,
    PodService,
    Rootfs,
    Started,
    container_env,
)
from runplane.agent.output import shown
from runplane.agent.procgroup import signal_name

if TYPE_CHECKING:
    from runplane.agent.executor import _Job

SERVICE_ENV = "RUNPLANE_SERVICE_NAME"
POD_DIR_ENV = "RUNPLANE_POD_DIR"
#: Characters of a health gate's last output an error quotes.
HEALTH_OUTPUT_CHARS = 300


async def run_pod(job: _Job) -> Finished:
    launch = job.spec.launch
    image_run = job.image_run
    if image_run is None or launch is None or not launch.no_internet:
        return await _Pod(job).run()
    async with _netns_holder(launch.bwrap or "bwrap") as pid:
        image_run.netns_pid = pid
        return await _Pod(job).run()


@asynccontextmanager
async def _netns_holder(bwrap: str) -> AsyncIterator[int]:
    """A process holding a network namespace with loopback only (its pid), for a pod of
    images without network; killed at the end."""
    read, write = os.pipe()
    try:
        holder = ["--unshare-net", "--die-with-parent", "--info-fd", str(write)]
        proc = await trio.lowlevel.open_process(
            [bwrap, "--dev-bind", "/", "/", *holder, "--", "sleep", "infinity"],
            pass_fds=(write,),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        os.close(write)
    try:
        info = await trio.to_thread.run_sync(_read_all, read)
        yield int(json.loads(info)["child-pid"])
    finally:
        with trio.CancelScope(shield=True):
            proc.kill()
            await proc.wait()


def _read_all(fd: int) -> bytes:
    data = b""
    try:
        while chunk := os.read(fd, 4096):
            data += chunk
    finally:
        os.close(fd)
    return data


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
        image = service.image or job.spec.image
        if image is None:
            env = {**job.env, **service.env, SERVICE_ENV: service.name}
            env[POD_DIR_ENV] = str(job.workdir)
        else:
            own = {**service.env, SERVICE_ENV: service.name, POD_DIR_ENV: CONTAINER_WORKDIR}
            env = container_env(job.spec, image, own)
        started = trio.Event()

        def on_start(pid: int) -> None:
            self.pids[service.name] = pid
            started.set()
            if service.health is None:
                self.up[service.name].set()

        command = shlex.join(service.command)
        label = f"service {service.name}: running: {shown(command)}"
        async with trio.open_nursery() as gate:
            if service.health is not None:
                gate.start_soon(self._health, service, service.health, env, started, image)
            result = await job._run_process(
                list(service.command),
                "command",
                label,
                service=service.name,
                env=env,
                stop=self.stop,
                started=on_start,
                image=image,
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
        self,
        service: PodService,
        health: PodHealth,
        env: dict[str, str],
        started: trio.Event,
        image: Rootfs | None,
    ) -> None:
        await started.wait()
        job = self.job
        failures = 0
        while not self.stop.is_set():
            ok, output = await self._probe(health, env, image)
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

    async def _probe(
        self, health: PodHealth, env: dict[str, str], image: Rootfs | None
    ) -> tuple[bool, str]:
        job = self.job
        argv, identity = list(health.command), job.identity
        if image is not None and job.image_run is not None:
            wrapped = await job.image_run.wrap(argv, env, image)
            if isinstance(wrapped, str):
                return False, wrapped
            argv, identity = wrapped, {}
        try:
            with trio.move_on_after(health.timeout_sec) as scope:
                done = await trio.run_process(
                    argv,
                    cwd=job.workdir,
                    env=env,
                    stdin=b"",
                    capture_stdout=True,
                    capture_stderr=True,
                    check=False,
                    **identity,
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
