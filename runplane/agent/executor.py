"""The ``process`` executor: run one job as a process group in its own working directory.

Transport-free: the node agent calls :func:`run_job` and forwards the events it reports
(:class:`Started`, :class:`LogLines`, :class:`Metric`, then exactly one :class:`Finished`)
to the server however it likes. See ``docs/executor.md`` for the full contract.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal, Protocol, TypeAlias

import trio

from runplane.agent.isolation import JobUser, hand_over
from runplane.agent.launch import (
    SANDBOX_STREAMS_DIR,
    CommandNotExecutable,
    CommandNotFound,
    Launch,
    resolve_program,
)
from runplane.agent.metrics_line import MetricLineError, parse_metric_line, quote
from runplane.agent.streams import STREAMS_ENV

Stream: TypeAlias = Literal["stdout", "stderr", "system"]
Outcome: TypeAlias = Literal["succeeded", "failed", "timeout", "cancelled"]
Stage: TypeAlias = Literal["setup", "requirements", "command"]

# Log batching: one LogLines event per this many lines, or this long after its first line.
MAX_BATCH_LINES = 256
BATCH_INTERVAL_SEC = 0.05
# Longer lines are split into pieces of at most this many bytes (a system line says so).
MAX_LINE_BYTES = 64 * 1024
# Once the job's process group is gone, a pipe still held open by a process that left the
# group (setsid) is read until it has been quiet this long, and never longer than the cap.
DRAIN_IDLE_SEC = 1.0
DRAIN_CAP_SEC = 10.0
# PATH for the job when the agent itself has none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Characters of a command (or setup snippet) its ``running: ...`` system line shows; the
# whole is in the job's spec (``GET /v1/jobs/<id>``).
SHOWN_CHARS = 120
# A workdir file pip-installs before the command runs (into the workdir's ``.deps`` sibling).
REQUIREMENTS_FILE = "requirements.txt"
#: Job env key forcing the requirements.txt install on (truthy) or off (anything else).
REQUIREMENTS_KEY = "RUNPLANE_REQUIREMENTS"
#: What a stack's ``install_requirements`` config key arrives as (the python stack: true).
REQUIREMENTS_CONFIG_KEY = "RUNPLANE_CONFIG_INSTALL_REQUIREMENTS"

_READ_SIZE = 64 * 1024
_CHANNEL_SIZE = 16
_POLL_SEC = 0.05


# --------------------------------------------------------------------------- the contract


@dataclass(frozen=True, slots=True)
class ExecSpec:
    """One job, as the node agent hands it to the executor."""

    job_id: str
    command: list[str]
    env: dict[str, str]
    workdir: Path
    setup: str | None = None
    timeout_sec: float | None = None
    inline_files: dict[str, str] = field(default_factory=dict)
    grace_sec: float = 10.0
    #: run every process of the job as this user (its primary group, no supplementary
    #: groups), the workdir handed to it first; None: as the agent's own user
    user: JobUser | None = None
    #: how the processes start when limits or the sandbox apply (cgroups, bubblewrap,
    #: setpriv; ``runplane/agent/launch.py``); None: directly
    launch: Launch | None = None
    #: the job's streams directory (``runplane/agent/streams.py``), already made: the job
    #: sees it as ``RUNPLANE_STREAMS_DIR`` (``/streams`` in the sandbox, which binds it)
    streams_dir: Path | None = None
    #: a session's pod: its services run instead of ``command`` (``runplane/agent/pod.py``)
    pod: tuple[PodService, ...] = ()


@dataclass(frozen=True, slots=True)
class PodHealth:
    command: list[str]
    period_sec: float
    timeout_sec: float
    retries: int


@dataclass(frozen=True, slots=True)
class PodService:
    """One service of a pod: a process group of the pod's job, started once every service
    it ``needs`` is up (started, and past its health gate when it has one)."""

    name: str
    command: list[str]
    env: dict[str, str] = field(default_factory=dict)
    needs: tuple[str, ...] = ()
    health: PodHealth | None = None


@dataclass(frozen=True, slots=True)
class Started:
    """A process of the job started: the setup shell, the requirements.txt install, then
    the command."""

    pid: int
    stage: Stage
    #: the job is up (False for a pod service started before the pod is ready: its pid is
    #: the job's, but the job is not ``running`` yet)
    ready: bool = True


#: One log line: (stream, text), or (stream, text, service) for a pod's service.
Line: TypeAlias = tuple[Stream, str] | tuple[Stream, str, str]


@dataclass(frozen=True, slots=True)
class LogLines:
    """A batch of log lines in the order the executor read them."""

    lines: tuple[Line, ...]


@dataclass(frozen=True, slots=True)
class Metric:
    """One ``::metric`` line of the command's stdout."""

    step: int | None
    values: dict[str, float]


@dataclass(frozen=True, slots=True)
class Finished:
    """The last event of a job; also the return value of :func:`run_job`."""

    outcome: Outcome
    exit_code: int | None
    error: str | None
    final_metrics: dict[str, float]
    duration_sec: float
    #: the signal that ended the command's process (``SIGTERM``, ``SIGKILL``), if one did
    signal: str | None = None


Event: TypeAlias = Started | LogLines | Metric | Finished
ReportFn: TypeAlias = Callable[[Event], Awaitable[None]]
Report: TypeAlias = ReportFn | trio.MemorySendChannel[Event]


class CancelSignal(Protocol):
    """What :func:`run_job` needs of a cancel request; :class:`trio.Event` is one."""

    def is_set(self) -> bool: ...

    async def wait(self) -> None: ...


async def run_job(spec: ExecSpec, report: Report, cancel: CancelSignal | None = None) -> Finished:
    """Run ``spec`` to the end and return its :class:`Finished` (also reported, last).

    Every failure of the job itself (missing command, bad inline file, failing setup, ...)
    ends as a ``failed`` :class:`Finished`, never as an exception. Exceptions propagate only
    from ``report`` itself or from cancellation of the caller's scope; in both cases the job's
    process group is SIGKILLed before ``run_job`` unwinds.
    """
    emit = _emitter(report)
    send, recv = trio.open_memory_channel[_Item](_CHANNEL_SIZE)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_batch_events, recv, emit, MAX_BATCH_LINES, BATCH_INTERVAL_SEC)
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


def job_environment(spec: ExecSpec, agent_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the job's processes get.

    A minimal base (PATH and LANG from the agent when set, HOME = the workdir,
    ``PYTHONUNBUFFERED=1``, ``RUNPLANE_JOB_ID``) with ``spec.env`` on top, then
    ``RUNPLANE_STREAMS_DIR`` when the job has a streams directory. Nothing else of the
    agent's own environment (tokens, ``RUNPLANE_*`` settings, cloud credentials) is
    passed on.
    """
    agent = os.environ if agent_env is None else agent_env
    env = {
        "PATH": agent.get("PATH") or DEFAULT_PATH,
        "HOME": str(spec.workdir.absolute()),
        "LANG": agent.get("LANG") or "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "RUNPLANE_JOB_ID": spec.job_id,
    }
    env.update(spec.env)
    if spec.streams_dir is not None:
        sandboxed = spec.launch is not None and spec.launch.sandboxed
        env[STREAMS_ENV] = SANDBOX_STREAMS_DIR if sandboxed else str(spec.streams_dir.absolute())
    return env


# --------------------------------------------------------------------------- reporting

_Lines: TypeAlias = list[Line]
_Item: TypeAlias = _Lines | Metric | Started


def _emitter(report: Report) -> ReportFn:
    if isinstance(report, trio.MemorySendChannel):
        return report.send
    return report


async def _batch_events(
    recv: trio.MemoryReceiveChannel[_Item],
    emit: ReportFn,
    max_lines: int,
    interval: float,
) -> None:
    """Turn the item stream into events: lines batched, everything else in order."""
    pending: _Lines = []
    deadline = math.inf

    async def flush() -> None:
        nonlocal pending, deadline
        if pending:
            batch, pending = pending, []
            await emit(LogLines(tuple(batch)))
        deadline = math.inf

    async with recv:
        while True:
            item: _Item | None = None
            with trio.move_on_at(deadline) as scope:
                try:
                    item = await recv.receive()
                except trio.EndOfChannel:
                    break
            if scope.cancelled_caught:
                await flush()
                continue
            if isinstance(item, list):
                if not pending:
                    deadline = trio.current_time() + interval
                pending.extend(item)
                while len(pending) >= max_lines:
                    batch, pending = pending[:max_lines], pending[max_lines:]
                    await emit(LogLines(tuple(batch)))
                if not pending:
                    deadline = math.inf
            elif item is not None:
                await flush()
                await emit(item)
    await flush()


# --------------------------------------------------------------------------- output lines


class LineSplitter:
    """Bytes of one stream in, decoded lines out.

    Lines end at ``\\n`` (a trailing ``\\r`` is dropped); bytes are decoded as UTF-8 with
    ``errors="replace"``; a line longer than ``max_bytes`` is split into pieces at UTF-8
    character boundaries, followed by a ``system`` line saying so.
    """

    def __init__(self, stream: Stream, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.stream = stream
        self.max_bytes = max_bytes
        self._buf = bytearray()
        self._parts = 0  # pieces of the current line already emitted
        self._emitted = 0  # bytes of the current line already emitted

    def feed(self, data: bytes | bytearray) -> _Lines:
        out: _Lines = []
        buf = self._buf
        buf += data
        start = 0
        while (nl := buf.find(b"\n", start)) != -1:
            self._end_line(bytes(buf[start:nl]), out)
            start = nl + 1
        del buf[:start]
        while len(buf) > self.max_bytes:
            cut = _utf8_cut(buf, self.max_bytes)
            self._piece(bytes(buf[:cut]), out)
            del buf[:cut]
        return out

    def close(self) -> _Lines:
        """Lines still buffered at end of stream (a last line without ``\\n``)."""
        out: _Lines = []
        if self._buf or self._parts:
            self._end_line(bytes(self._buf), out)
            self._buf.clear()
        return out

    def _piece(self, raw: bytes, out: _Lines) -> None:
        out.append((self.stream, raw.decode("utf-8", errors="replace")))
        self._parts += 1
        self._emitted += len(raw)

    def _end_line(self, raw: bytes, out: _Lines) -> None:
        if raw.endswith(b"\r"):
            raw = raw[:-1]
        while len(raw) > self.max_bytes:
            cut = _utf8_cut(raw, self.max_bytes)
            self._piece(raw[:cut], out)
            raw = raw[cut:]
        if raw or not self._parts:
            self._piece(raw, out)
        if self._parts > 1:
            out.append(
                (
                    "system",
                    f"{self.stream} line of {self._emitted} bytes was split into "
                    f"{self._parts} lines of at most {self.max_bytes} bytes",
                )
            )
        self._parts = 0
        self._emitted = 0


def _utf8_cut(buf: bytes | bytearray, limit: int) -> int:
    """A cut position <= limit that does not split a UTF-8 sequence (when it can help it)."""
    cut = limit
    while cut > limit - 3 and cut > 0 and (buf[cut] & 0xC0) == 0x80:
        cut -= 1
    return cut if cut > 0 else limit


# --------------------------------------------------------------------------- process groups


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _live_members(pgid: int) -> list[int] | None:
    """Non-zombie pids of process group ``pgid`` from /proc; ``None`` without /proc."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    members: list[int] = []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ..."; comm may contain spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] not in (b"Z", b"X"):
            members.append(int(name))
    return members


async def _group_alive(pgid: int) -> bool:
    """Whether any live process is left in the group (zombies waiting for a reaper don't count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    members = await trio.to_thread.run_sync(_live_members, pgid)
    return True if members is None else bool(members)


# --------------------------------------------------------------------------- one job


@dataclass(slots=True)
class _ProcResult:
    start_error: str | None = None
    returncode: int | None = None
    stopped: Literal["timeout", "cancelled"] | None = None
    sigkilled: bool = False  # our stop needed SIGKILL after the grace period


class _Drain:
    """Bounds reading a pipe once every process of the job's group is gone."""

    def __init__(self) -> None:
        self._cap = math.inf
        self._scopes: set[trio.CancelScope] = set()

    def start(self) -> None:
        now = trio.current_time()
        self._cap = now + DRAIN_CAP_SEC
        for scope in self._scopes:
            scope.deadline = min(now + DRAIN_IDLE_SEC, self._cap)

    def _deadline(self) -> float:
        if self._cap == math.inf:
            return math.inf
        return min(trio.current_time() + DRAIN_IDLE_SEC, self._cap)

    @contextmanager
    def read_scope(self) -> Iterator[trio.CancelScope]:
        scope = trio.CancelScope(deadline=self._deadline())
        self._scopes.add(scope)
        try:
            with scope:
                yield scope
        finally:
            self._scopes.discard(scope)


class _Job:
    def __init__(
        self,
        spec: ExecSpec,
        out: trio.MemorySendChannel[_Item],
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

    def _stopped_error(self, result: _ProcResult) -> str:
        if result.stopped == "timeout":
            what = f"timed out after {_seconds(self.spec.timeout_sec or 0)}"
        else:
            what = "cancelled"
        if result.sigkilled:
            return f"{what}; killed with SIGKILL after {_seconds(self.grace)} grace"
        return what

    # -- the run

    async def run(self) -> Finished:
        spec = self.spec
        if self.cancel is not None and self.cancel.is_set():
            return await self._finish("cancelled", None, "cancelled", "cancelled before start")
        if not spec.command and not spec.pod:
            return await self._fail("empty command")
        try:
            await trio.to_thread.run_sync(
                _prepare_workdir, self.workdir, spec.inline_files, spec.user
            )
        except _WorkdirError as exc:
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

    async def _main(self) -> Finished:
        if self.spec.pod:
            from runplane.agent.pod import run_pod  # (pod.py builds on this module)

            return await run_pod(self)
        return await self._stages()

    async def _stages(self) -> Finished:
        """setup, the requirements install, the command: each a process, in order."""
        spec = self.spec

        if spec.setup:
            script = shown(shlex.quote(spec.setup), spec.job_id, "spec.setup")
            label = f"running setup: sh -c {script}"
            setup = await self._run_process(["sh", "-c", spec.setup], "setup", label)
            if setup.start_error is not None:
                return await self._fail(f"setup could not start: {setup.start_error}")
            if setup.stopped is not None:
                error = self._stopped_error(setup) + " (during setup)"
                return await self._finish(setup.stopped, None, error, error)
            code = setup.returncode
            if code is not None and code < 0:
                return await self._fail(f"setup killed by signal {_signal_name(-code)}")
            if code:
                return await self._fail(f"setup exited with code {code}")
            if self.cancel is not None and self.cancel.is_set():
                return await self._finish("cancelled", None, "cancelled", "cancelled after setup")

        installed = await self._install_requirements()
        if installed is not None:
            return installed

        label = f"running: {shown(shlex.join(spec.command), spec.job_id, 'spec.command')}"
        result = await self._run_process(list(spec.command), "command", label)
        if result.start_error is not None:
            return await self._fail(result.start_error)
        code = result.returncode
        exit_code = code if code is not None and code >= 0 else None
        killed_by = _signal_name(-code) if code is not None and code < 0 else None
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

    async def _install_requirements(self) -> Finished | None:
        """pip-install the workdir's ``requirements.txt``, if there is one, with the job's
        python into ``<workdir>.deps`` (``--target``: the node's interpreter is left alone),
        which the command then finds on ``PYTHONPATH`` (scripts on ``PATH``). A Finished
        when the install failed, timed out or was cancelled."""
        if not wants_requirements(self.env):
            return None
        text = await trio.to_thread.run_sync(_read_requirements, self.workdir)
        if text is None:
            return None
        python = job_python(self.spec.command, self.env)
        if python is None:
            await self._system(
                f"{REQUIREMENTS_FILE} not installed: no python3 or python on the job's PATH"
            )
            return None
        lines = requirement_lines(text)
        target = self.workdir.with_name(f"{self.workdir.name}.deps")
        launch = self.spec.launch
        if self.spec.user is not None:  # the job user may not create it next to the workdir
            try:
                await trio.to_thread.run_sync(_own_dir, target, self.spec.user)
            except OSError as exc:
                return await self._fail(f"cannot create {target}: {exc.strerror or exc}")
        elif launch is not None and launch.sandbox:  # outside the workdir: bound in, so made
            await trio.to_thread.run_sync(partial(target.mkdir, mode=0o700, exist_ok=True))
        self.writable.append(target)
        argv = [python, "-m", "pip", "install", *PIP_OPTIONS, "--target", str(target)]
        argv += ["-r", REQUIREMENTS_FILE]
        short = [python, "-m", "pip", "install", "-r", REQUIREMENTS_FILE]
        short += ["--target", f"../{target.name}"]  # (the pip options are in the docs)
        label = (
            f"installing {REQUIREMENTS_FILE} ({lines} line{'' if lines == 1 else 's'}): "
            + shlex.join(short)
        )
        started = trio.current_time()
        result = await self._run_process(argv, "requirements", label)
        failed = f"installing {REQUIREMENTS_FILE} failed"
        if result.start_error is not None:
            return await self._fail(f"{failed}: {result.start_error}")
        if result.stopped is not None:
            error = f"{self._stopped_error(result)} (during the {REQUIREMENTS_FILE} install)"
            return await self._finish(result.stopped, None, error, error)
        code = result.returncode
        if code is not None and code < 0:
            return await self._fail(f"{failed}: pip killed by signal {_signal_name(-code)}")
        if code:
            return await self._fail(f"{failed}: pip exited with code {code}")
        took = trio.current_time() - started
        await self._system(f"{REQUIREMENTS_FILE} installed: pip exited with code 0 ({took:.2f} s)")
        self.env = with_deps(self.env, target)
        if self.cancel is not None and self.cancel.is_set():
            return await self._finish(
                "cancelled", None, "cancelled", f"cancelled after the {REQUIREMENTS_FILE} install"
            )
        return None

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
    ) -> _ProcResult:
        """Run one process of the job in its own session, its output read until EOF. A pod
        service passes its name (its lines carry it), its environment, the pod's stop
        signal (instead of the job's cancel) and ``started`` (called with the pid; the job
        is not announced ``running`` by this process)."""
        result = _ProcResult()
        cancel = self.cancel if stop is None else stop
        if cancel is not None and cancel.is_set():
            result.stopped = "cancelled"
            return result
        env = self.env if env is None else env
        identity = self.identity
        launch = self.spec.launch
        if launch is not None and launch.wraps:
            try:
                program = resolve_program(argv[0], env.get("PATH"), self.workdir, launch.user)
            except CommandNotFound:
                await self._system(label)
                result.start_error = f"command not found: {argv[0]}"
                return result
            except CommandNotExecutable:
                await self._system(label)
                result.start_error = f"command not executable: {argv[0]}"
                return result
            writable = [p for p in self.writable if p.is_dir()]
            streams = self.spec.streams_dir
            streams = streams.absolute() if streams is not None and streams.is_dir() else None
            argv = launch.argv([program, *argv[1:]], self.workdir, writable, streams)
            identity = {}  # the launch chain switches user (setpriv)
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
            result.start_error = _start_error(argv[0], self.workdir, exc)
            return result
        pgid = proc.pid  # a session leader leads its own process group
        assert proc.stdout is not None
        assert proc.stderr is not None
        stdout, stderr = proc.stdout, proc.stderr
        drain = _Drain()

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
            result.sigkilled = await self._terminate(proc, pgid)

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
                # The main process is gone; nothing else of its group may outlive it.
                if result.stopped is None and await _group_alive(pgid):
                    _signal_group(pgid, signal.SIGKILL)
                    await self._system(
                        f"{stage} exited; killed the background processes it left running"
                    )
                # (a pod's services share the job's cgroup: the others are not leftovers)
                cgroup = launch.cgroup if launch is not None and service is None else None
                if result.stopped is None and cgroup is not None:
                    killed = await trio.to_thread.run_sync(cgroup.kill_all)
                    if killed:
                        await self._system(
                            f"{stage} exited; killed {killed} process"
                            f"{'' if killed == 1 else 'es'} it left running outside its "
                            "process group"
                        )
                drain.start()
            done = True
        finally:
            if not done:
                # Cancelled from outside, or ``report`` failed: no process may outlive us.
                with trio.CancelScope(shield=True):
                    _signal_group(pgid, signal.SIGKILL)
                    await proc.wait()
                    await trio.aclose_forcefully(stdout)
                    await trio.aclose_forcefully(stderr)
        return result

    async def _terminate(self, proc: trio.Process, pgid: int) -> bool:
        """SIGTERM the group, SIGKILL what is left after the grace period; True if needed."""
        _signal_group(pgid, signal.SIGTERM)
        end = trio.current_time() + self.grace
        while trio.current_time() < end:
            if proc.returncode is not None and not await _group_alive(pgid):
                return False
            await trio.sleep(min(_POLL_SEC, max(0.0, end - trio.current_time())))
        if proc.returncode is not None and not await _group_alive(pgid):
            return False
        _signal_group(pgid, signal.SIGKILL)
        return True

    async def _pump(
        self,
        stream: trio.abc.ReceiveStream,
        name: Literal["stdout", "stderr"],
        metrics: bool,
        drain: _Drain,
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

    async def _send_lines(self, lines: _Lines, metrics: bool, service: str | None = None) -> None:
        if service is not None:
            lines = [(line[0], line[1], service) for line in lines]
        if not metrics:
            if lines:
                await self.out.send(lines)
            return
        run: _Lines = []
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


# --------------------------------------------------------------------------- helpers


class _WorkdirError(Exception):
    pass


def _prepare_workdir(
    workdir: Path, inline_files: Mapping[str, str], user: JobUser | None = None
) -> None:
    """Create the workdir, write the inline files, and hand it all to ``user`` (blocking;
    run in a thread). With a user the workdir must still be the agent's alone: it is
    written and walked as the agent, and given away last."""
    try:
        workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise _WorkdirError(f"cannot create workdir {workdir}: {exc.strerror or exc}") from None
    if user is not None:
        st = os.lstat(workdir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise _WorkdirError(
                f"workdir {workdir} must be a directory of the agent's user before the job's "
                "user gets it"
            )
        os.chmod(workdir, 0o700)
    root = workdir.resolve()
    for rel, content in inline_files.items():
        path = Path(rel)
        if not rel or path.is_absolute() or ".." in path.parts or not path.parts:
            raise _WorkdirError(f"inline file path must be relative inside the workdir: {rel!r}")
        target = root / path
        if not target.parent.resolve().is_relative_to(root):
            raise _WorkdirError(f"inline file path leaves the workdir: {rel!r}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink():
                target.unlink()
            target.write_text(content, encoding="utf-8")
            target.chmod(0o755 if content.startswith("#!") else 0o644)
        except OSError as exc:
            raise _WorkdirError(
                f"cannot write inline file {rel!r}: {exc.strerror or exc}"
            ) from None
    if user is not None:
        try:
            hand_over(workdir, user)
        except OSError as exc:
            raise _WorkdirError(
                f"cannot give workdir {workdir} to user {user.name}: {exc.strerror or exc}"
            ) from None


def _own_dir(path: Path, user: JobUser) -> None:
    """A fresh empty directory at ``path`` (0700) owned by ``user``."""
    if os.path.lexists(path):
        shutil.rmtree(path)
    path.mkdir(mode=0o700)
    os.chown(path, user.uid, user.gid)


def _start_error(program: str, workdir: Path, exc: OSError | ValueError) -> str:
    if isinstance(exc, ValueError):
        return f"cannot start {program}: {exc}"
    filename = exc.filename
    if filename is not None and str(filename) == str(workdir):
        return f"cannot enter workdir {workdir}: {exc.strerror}"
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {program}"
    if isinstance(exc, PermissionError):
        return f"command not executable: {program}"
    return f"cannot start {program}: {exc.strerror or exc}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _seconds(value: float) -> str:
    return f"{value:g} s"


_LINE_BREAKS = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
_ESCAPED = {ord(c): c.encode("unicode_escape").decode("ascii") for c in _LINE_BREAKS}


def shown(text: str, job_id: str, field: str) -> str:
    """``text`` (a shell-quoted command) for a system line: on one line (line breaks
    escaped as ``\\n``) and cut after :data:`SHOWN_CHARS` characters, with where to read
    the whole (``field`` of the job's spec, e.g. ``spec.command``)."""
    line = text.translate(_ESCAPED)
    if len(line) <= SHOWN_CHARS:
        return line
    name = field.rsplit(".", 1)[-1]
    return f"{line[:SHOWN_CHARS]}\u2026 (full {name}: GET /v1/jobs/{job_id}, {field})"


#: pip options of the requirements.txt install: no prompt, no progress bars, no cache
#: in HOME (the workdir), no nag about pip's own version.
PIP_OPTIONS = (
    "--disable-pip-version-check",
    "--no-input",
    "--no-cache-dir",
    "--progress-bar",
    "off",
)
_PYTHON = re.compile(r"python[0-9.]*")


def wants_requirements(env: Mapping[str, str]) -> bool:
    """Whether a job installs its workdir's requirements.txt: ``RUNPLANE_REQUIREMENTS``
    decides when set (truthy: yes); otherwise its stack's ``install_requirements`` config
    key does (the python stack sets it; a shell job in a repo with a requirements.txt does
    not run pip unasked)."""
    explicit = env.get(REQUIREMENTS_KEY)
    if explicit is not None:
        return explicit.strip().lower() in ("1", "true", "yes", "on")
    return env.get(REQUIREMENTS_CONFIG_KEY, "").strip().lower() == "true"


def _read_requirements(workdir: Path) -> str | None:
    """The text of the workdir's requirements.txt; None when there is no such file."""
    path = workdir / REQUIREMENTS_FILE
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def requirement_lines(text: str) -> int:
    """The lines of a requirements file that say something (not blank, not a comment)."""
    return sum(
        1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    )


def job_python(command: list[str], env: Mapping[str, str]) -> str | None:
    """The python a job runs: its command's program when that is a python (``python3``,
    ``.venv/bin/python``), else ``python3`` or ``python`` on the job's PATH; None without."""
    if command and _PYTHON.fullmatch(os.path.basename(command[0])):
        return command[0]
    for name in ("python3", "python"):
        if shutil.which(name, path=env.get("PATH")):
            return name
    return None


def with_deps(env: Mapping[str, str], target: Path) -> dict[str, str]:
    """``env`` with the requirements install ``target`` first on PYTHONPATH (and its
    ``bin`` first on PATH, for the scripts of the packages)."""
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(target), env.get("PYTHONPATH")) if p)
    out["PATH"] = os.pathsep.join(p for p in (str(target / "bin"), env.get("PATH")) if p)
    return out
