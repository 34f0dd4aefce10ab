"""The ``process`` executor: run one job as a process group in its own working directory.

Transport-free: the node agent calls :func:`run_job` and forwards the events it reports
(:class:`Started`, :class:`LogLines`, :class:`Metric`, then exactly one :class:`Finished`)
to the server however it likes. See ``docs/executor.md`` for the full contract
(``execspec.py``); the parts: its output (``output.py``), its process groups
(``procgroup.py``), its workdir (``workdir.py``), a workspace's requirements.txt
(``requirements.py``) and a session's pod (``pod.py``).
"""

from __future__ import annotations

import math
import shlex
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import trio

from runplane.agent.container import ImageRun, command_of
from runplane.agent.execspec import (
    CancelSignal,
    Event,
    ExecSpec,
    Finished,
    Line,
    LogLines,
    Metric,
    Outcome,
    PodHealth,
    PodService,
    Report,
    Rootfs,
    Stage,
    Started,
    Stream,
    job_environment,
)
from runplane.agent.launch import (
    CommandNotExecutable,
    CommandNotFound,
    resolve_program,
    start_error,
)
from runplane.agent.metrics_line import MetricLineError, parse_metric_line, quote
from runplane.agent.output import (
    BATCH_INTERVAL_SEC,
    MAX_BATCH_LINES,
    MAX_LINE_BYTES,
    Item,
    Lines,
    LineSplitter,
    batch_events,
    emitter,
    shown,
)
from runplane.agent.procgroup import (
    PipeDrain,
    ProcResult,
    group_alive,
    signal_group,
    signal_name,
    terminate,
)
from runplane.agent.requirements import install_requirements
from runplane.agent.workdir import WorkdirError, prepare_workdir

__all__ = [
    "MAX_BATCH_LINES",
    "MAX_LINE_BYTES",
    "CancelSignal",
    "Event",
    "ExecSpec",
    "Finished",
    "Line",
    "LogLines",
    "Metric",
    "Outcome",
    "PodHealth",
    "PodService",
    "Report",
    "Stage",
    "Started",
    "Stream",
    "job_environment",
    "run_job",
    "shown",
]


_READ_SIZE = 64 * 1024
_CHANNEL_SIZE = 16


async def run_job(spec: ExecSpec, report: Report, cancel: CancelSignal | None = None) -> Finished:
    """Run ``spec`` to the end and return its :class:`Finished` (also reported, last).

    Every failure of the job itself (missing command, bad inline file, failing setup, ...)
    ends as a ``failed`` :class:`Finished`, never as an exception. Exceptions propagate only
    from ``report`` itself or from cancellation of the caller's scope; in both cases the job's
    process group is SIGKILLed before ``run_job`` unwinds.
    """
    emit = emitter(report)
    send, recv = trio.open_memory_channel[Item](_CHANNEL_SIZE)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(batch_events, recv, emit, MAX_BATCH_LINES, BATCH_INTERVAL_SEC)
            async with send:
                finished = await _Job(spec, send, cancel).run()
    except BaseExceptionGroup as group:
        # A failing ``report`` is one error: raise it as such, not wrapped in a group.
        exc = _sole(group)
        if exc is group:
            raise
        raise exc from exc.__cause__
    await emit(finished)
    return finished


def _sole(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


# --------------------------------------------------------------------------- one job


class _Job:
    def __init__(
        self,
        spec: ExecSpec,
        out: trio.MemorySendChannel[Item],
        cancel: CancelSignal | None,
    ) -> None:
        self.spec = spec
        self.out = out
        self.workdir = spec.workdir.absolute()
        user = spec.user
        self.identity: dict[str, Any] = (
            {} if user is None else {"user": user.uid, "group": user.gid, "extra_groups": []}
        )
        self.cancel = cancel
        self.started_at = trio.current_time()
        timeout = spec.timeout_sec
        self.deadline = self.started_at + timeout if timeout and timeout > 0 else math.inf
        self.grace = max(0.0, spec.grace_sec)
        self.final_metrics: dict[str, float] = {}
        self.image_run = ImageRun.of(spec, self.workdir)
        self.env = job_environment(spec)
        #: directories beside the workdir the job may write (the requirements target)
        self.writable: list[Path] = []

    # -- results

    def _elapsed(self) -> float:
        return trio.current_time() - self.started_at

    async def _system(self, text: str) -> None:
        await self.out.send([("system", text)])

    async def _finish(
        self,
        outcome: Outcome,
        exit_code: int | None,
        error: str | None,
        summary: str,
        signal: str | None = None,
    ) -> Finished:
        duration = self._elapsed()
        launch = self.spec.launch
        if (
            outcome == "failed"
            and launch is not None
            and launch.ram_gb is not None
            and await trio.to_thread.run_sync(launch.out_of_memory)
        ):
            error = (
                f"out of memory: the job went over its {launch.ram_gb:g} GB memory limit "
                f"(limits.ram_gb) and the kernel killed it ({error}); raise limits.ram_gb "
                "or use less memory"
            )
            summary = error
        await self._system(f"{summary} ({duration:.2f} s)")
        return Finished(
            outcome=outcome,
            exit_code=exit_code,
            error=error,
            final_metrics=dict(self.final_metrics),
            duration_sec=duration,
            signal=signal,
        )

    async def _fail(self, error: str) -> Finished:
        return await self._finish("failed", None, error, error)

    def _stopped_error(self, result: ProcResult) -> str:
        if result.stopped == "timeout":
            what = f"timed out after {_seconds(self.spec.timeout_sec or 0)}"
        else:
            what = "cancelled"
        if result.sigkilled:
            # a cancel may carry its own grace (a preemption's), as the watchdog used it
            asked = getattr(self.cancel, "grace", None) if result.stopped == "cancelled" else None
            grace = self.grace if asked is None else asked
            return f"{what}; killed with SIGKILL after {_seconds(grace)} grace"
        return what

    # -- the run

    async def run(self) -> Finished:
        spec = self.spec
        if self.cancel is not None and self.cancel.is_set():
            return await self._finish("cancelled", None, "cancelled", "cancelled before start")
        if not command_of(spec) and not spec.pod:
            return await self._fail("empty command")
        if self.image_run is not None and (refusal := await self.image_run.start(self._system)):
            return await self._fail(refusal)
        try:
            await trio.to_thread.run_sync(
                prepare_workdir, self.workdir, spec.inline_files, spec.user
            )
        except WorkdirError as exc:
            return await self._fail(str(exc))
        launch = spec.launch
        if launch is None:
            return await self._main()
        try:
            await trio.to_thread.run_sync(launch.setup)
        except OSError as exc:
            return await self._fail(f"cannot set up the job's cgroup: {exc.strerror or exc}")
        try:
            return await self._main()
        finally:
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(launch.teardown)
                if self.image_run is not None:
                    await trio.to_thread.run_sync(self.image_run.cleanup)

    async def _main(self) -> Finished:
        if self.spec.pod:
            from runplane.agent.pod import run_pod  # (pod.py builds on this module)

            return await run_pod(self)
        return await self._stages()

    async def _stages(self) -> Finished:
        """setup, the requirements install, the command: each a process, in order."""
        spec = self.spec

        if spec.setup:
            script = shown(shlex.quote(spec.setup))
            label = f"running setup: sh -c {script}"
            setup = await self._run_process(["sh", "-c", spec.setup], "setup", label)
            if setup.start_error is not None:
                return await self._fail(f"setup could not start: {setup.start_error}")
            if setup.stopped is not None:
                error = self._stopped_error(setup) + " (during setup)"
                return await self._finish(setup.stopped, None, error, error)
            code = setup.returncode
            if code is not None and code < 0:
                return await self._fail(f"setup killed by signal {signal_name(-code)}")
            if code:
                return await self._fail(f"setup exited with code {code}")
            if self.cancel is not None and self.cancel.is_set():
                return await self._finish("cancelled", None, "cancelled", "cancelled after setup")

        installed = await install_requirements(self) if spec.image is None else None
        if installed is not None:  # (an image brings its own dependencies)
            return installed

        command = command_of(spec)
        label = f"running: {shown(shlex.join(command))}"
        result = await self._run_process(command, "command", label)
        if result.start_error is not None:
            return await self._fail(result.start_error)
        code = result.returncode
        exit_code = code if code is not None and code >= 0 else None
        killed_by = signal_name(-code) if code is not None and code < 0 else None
        if result.stopped is not None:
            error = self._stopped_error(result)
            how = f"exit code {code}" if exit_code is not None else f"signal {killed_by}"
            summary = f"{error}; the process ended with {how}"
            return await self._finish(result.stopped, exit_code, error, summary, killed_by)
        assert code is not None
        if code == 0:
            return await self._finish("succeeded", 0, None, "exit code 0")
        if code > 0:
            return await self._finish("failed", code, f"exit code {code}", f"exit code {code}")
        error = f"killed by signal {killed_by}"
        return await self._finish("failed", None, error, error, killed_by)

    async def _run_process(
        self,
        argv: list[str],
        stage: Stage,
        label: str,
        *,
        service: str | None = None,
        env: dict[str, str] | None = None,
        stop: CancelSignal | None = None,
        started: Callable[[int], None] | None = None,
        image: Rootfs | None = None,
    ) -> ProcResult:
        """Run one process of the job in its own session, its output read until EOF. A pod
        service passes its name (its lines carry it), its environment, the pod's stop
        signal (instead of the job's cancel), ``started`` (called with the pid; the job
        is not announced ``running`` by this process) and its ``image``."""
        result = ProcResult()
        cancel = self.cancel if stop is None else stop
        if cancel is not None and cancel.is_set():
            result.stopped = "cancelled"
            return result
        env = self.env if env is None else env
        wrapped = await self._wrapped(argv, env, label, image or self.spec.image)
        if isinstance(wrapped, str):
            result.start_error = wrapped
            return result
        argv, identity = wrapped
        try:
            proc = await trio.lowlevel.open_process(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                cwd=self.workdir,
                env=env,
                start_new_session=True,
                **identity,
            )
        except (OSError, ValueError) as exc:
            await self._system(label)
            result.start_error = start_error(argv[0], self.workdir, exc)
            return result
        await self._supervise(proc, result, cancel, stage, label, service, started)
        return result

    async def _wrapped(
        self, argv: list[str], env: dict[str, str], label: str, image: Rootfs | None
    ) -> tuple[list[str], dict[str, Any]] | str:
        """The argv and identity (user, groups) a process starts with: through the launch
        chain when there is one (it switches user itself: setpriv), or in ``image``
        (``container.py``); a start error as text."""
        if image is not None and self.image_run is not None:
            wrapped = await self.image_run.wrap(argv, env, image)
            if isinstance(wrapped, str):
                await self._system(label)
            return wrapped if isinstance(wrapped, str) else (wrapped, {})
        launch = self.spec.launch
        if launch is None or not launch.wraps:
            return argv, self.identity
        try:
            program = resolve_program(argv[0], env.get("PATH"), self.workdir, launch.user)
        except CommandNotFound:
            await self._system(label)
            return f"command not found: {argv[0]}"
        except CommandNotExecutable:
            await self._system(label)
            return f"command not executable: {argv[0]}"
        writable = [p for p in self.writable if p.is_dir()]
        streams = self.spec.streams_dir
        streams = streams.absolute() if streams is not None and streams.is_dir() else None
        return launch.argv([program, *argv[1:]], self.workdir, writable, streams), {}

    async def _supervise(
        self,
        proc: trio.Process,
        result: ProcResult,
        cancel: CancelSignal | None,
        stage: Stage,
        label: str,
        service: str | None,
        started: Callable[[int], None] | None,
    ) -> None:
        """Announce the started process, pump its output, stop it at the deadline or on
        ``cancel`` (into ``result``), and leave nothing of it behind."""
        pgid = proc.pid  # a session leader leads its own process group
        assert proc.stdout is not None
        assert proc.stderr is not None
        stdout, stderr = proc.stdout, proc.stderr
        drain = PipeDrain()

        async def watchdog() -> None:
            reason: Literal["timeout", "cancelled"] = "timeout"
            with trio.move_on_at(self.deadline):
                if cancel is None:
                    await trio.sleep_forever()
                else:
                    await cancel.wait()
                    reason = "cancelled"
            if proc.poll() is not None:
                return  # it ended on its own first
            result.stopped = reason
            grace = getattr(cancel, "grace", None) if reason == "cancelled" else None
            result.sigkilled = await terminate(proc, pgid, self.grace if grace is None else grace)

        done = False
        try:
            await self.out.send(Started(pid=proc.pid, stage=stage, ready=service is None))
            await self._system(label)
            if started is not None:
                started(proc.pid)
            async with trio.open_nursery() as pumps:
                pumps.start_soon(self._pump, stdout, "stdout", stage == "command", drain, service)
                pumps.start_soon(self._pump, stderr, "stderr", False, drain, service)
                async with trio.open_nursery() as waiting:
                    waiting.start_soon(watchdog)
                    result.returncode = await proc.wait()
                    if result.stopped is None:
                        waiting.cancel_scope.cancel()
                if result.stopped is None:
                    await self._kill_leftovers(pgid, stage, service)
                drain.start()
            done = True
        finally:
            if not done:
                # Cancelled from outside, or ``report`` failed: no process may outlive us.
                with trio.CancelScope(shield=True):
                    signal_group(pgid, signal.SIGKILL)
                    await proc.wait()
                    await trio.aclose_forcefully(stdout)
                    await trio.aclose_forcefully(stderr)

    async def _kill_leftovers(self, pgid: int, stage: Stage, service: str | None) -> None:
        """The main process is gone; nothing else of its group may outlive it, nor of the
        job's cgroup (but a pod's services share the job's cgroup: the others are not
        leftovers)."""
        if await group_alive(pgid):
            signal_group(pgid, signal.SIGKILL)
            await self._system(f"{stage} exited; killed the background processes it left running")
        launch = self.spec.launch
        cgroup = launch.cgroup if launch is not None and service is None else None
        if cgroup is not None:
            killed = await trio.to_thread.run_sync(cgroup.kill_all)
            if killed:
                await self._system(
                    f"{stage} exited; killed {killed} process"
                    f"{'' if killed == 1 else 'es'} it left running outside its "
                    "process group"
                )

    async def _pump(
        self,
        stream: trio.abc.ReceiveStream,
        name: Literal["stdout", "stderr"],
        metrics: bool,
        drain: PipeDrain,
        service: str | None = None,
    ) -> None:
        splitter = LineSplitter(name)
        try:
            while True:
                data: bytes | bytearray = b""
                with drain.read_scope() as scope:
                    data = await stream.receive_some(_READ_SIZE)
                if scope.cancelled_caught:
                    await self._send_lines(splitter.close(), metrics, service)
                    await self._system(
                        f"stopped reading {name}: still held open by a process that left "
                        "the job's process group"
                    )
                    return
                if not data:
                    break
                await self._send_lines(splitter.feed(data), metrics, service)
            await self._send_lines(splitter.close(), metrics, service)
        finally:
            await trio.aclose_forcefully(stream)

    async def _send_lines(self, lines: Lines, metrics: bool, service: str | None = None) -> None:
        if service is not None:
            lines = [(line[0], line[1], service) for line in lines]
        if not metrics:
            if lines:
                await self.out.send(lines)
            return
        run: Lines = []
        for line in lines:
            stream, text = line[0], line[1]
            try:
                parsed = parse_metric_line(text) if stream == "stdout" else None
            except MetricLineError as exc:
                run.append(("system", f"ignored metric line ({exc}): {quote(text)}"))
                continue
            if parsed is None:
                run.append(line)
                continue
            if run:
                await self.out.send(run)
                run = []
            self.final_metrics.update(parsed.values)
            await self.out.send(Metric(step=parsed.step, values=parsed.values))
        if run:
            await self.out.send(run)


def _seconds(value: float) -> str:
    return f"{value:g} s"
