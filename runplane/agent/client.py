"""The node agent: one WebSocket to the server, jobs run with the process executor.

:class:`Agent` connects to ``ws(s)://<server>/v1/nodes/connect``, says ``hello`` (credential
or join token, facts, the jobs it holds), heartbeats, runs the ``run`` messages it gets with
:func:`runplane.agent.executor.run_job` and reports what they do. The connection may drop
at any time: jobs keep running, their reports wait in the
:class:`~runplane.agent.outbox.Outbox` (bounded), and the agent reconnects with exponential
backoff (:mod:`runplane.agent.backoff`). ``job_finished`` messages are kept (also on disk,
:mod:`runplane.agent.finish_store`) until the server acknowledges them. See
``docs/agent.md``.

:meth:`Agent.drain` (SIGTERM for ``runplane agent``) stops it gracefully without turning
its jobs into cancels: it says ``draining`` (the server places nothing more here), lets
the running jobs finish for up to ``drain_timeout`` seconds, then stops the ones left and
hands them back (``job_released``: the server requeues them), and stops.

Self-update (``update`` from the server, :mod:`runplane.agent.update`): the agent installs
the offered version while its jobs run, reports ``update_status``, and once the install
took it drains (without a deadline unless ``update_drain_timeout``) and stops with
:attr:`Agent.restart_into` set: ``runplane agent`` then re-executes itself.

The same class runs as its own process (``runplane agent``, see :mod:`runplane.agent.main`)
and inside the server's nursery as the local agent.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import trio
import trio_websocket
from pydantic import ValidationError

from runplane import __version__
from runplane.agent import credentials
from runplane.agent import update as updates
from runplane.agent.backoff import BACKOFF_MAX_SEC, BACKOFF_MIN_SEC, Backoff
from runplane.agent.errors import AgentError, AgentRefused, AgentReplaced, DataDirBusy
from runplane.agent.executor import (
    Event,
    ExecSpec,
    Finished,
    LogLines,
    Metric,
    PodHealth,
    PodService,
    Started,
    run_job,
)
from runplane.agent.facts import collect_facts
from runplane.agent.finish_store import FinishStore
from runplane.agent.gpus import GpuPool
from runplane.agent.isolation import (
    DEFAULT_WORK_PARENT,
    HostPaths,
    JobUser,
    RunAsError,
    isolation_refusal,
    make_workdir,
    prepare_work_root,
    protect_data_dir,
    resolve_job_user,
)
from runplane.agent.jobplan import EXECUTORS, Executor, JobPlan, NodeRules
from runplane.agent.launch import find_setpriv
from runplane.agent.limits import probe
from runplane.agent.mask import masked
from runplane.agent.outbox import JobKey, Outbox, Queued, check_job_ref, job_key
from runplane.agent.outputs import collect_outputs
from runplane.agent.protocol import (
    CLOSE_DISABLED,
    CLOSE_PROTOCOL_ERROR,
    CLOSE_REPLACED,
    CLOSE_UNAUTHORIZED,
    CLOSE_UPGRADE_REQUIRED,
    PROTOCOL_VERSION,
    Cancel,
    Draining,
    Facts,
    FinishedAck,
    Heartbeat,
    Hello,
    JobFinished,
    JobLogs,
    JobMetric,
    JobPhase,
    JobReleased,
    PodServiceSpec,
    Refused,
    Resume,
    Run,
    RunningJob,
    RunSpec,
    Teleop,
    TeleopAck,
    Update,
    UpdateStatus,
    Welcome,
    decode_server,
    encode,
)
from runplane.agent.streams import append_teleop, forwarding, make_streams_dir
from runplane.agent.uids import DEFAULT_LOCK_DIR, UidPool, UidRange
from runplane.agent.workspace import MountError, mounts_of, prepare_mounts

log = logging.getLogger("runplane.agent")

CONNECT_PATH = "/v1/nodes/connect"

CONNECT_TIMEOUT_SEC = 10.0
WELCOME_TIMEOUT_SEC = 10.0
DISCONNECT_TIMEOUT_SEC = 2.0
#: A connection whose server does not answer a WebSocket ping within max(this, 3 heartbeats)
#: is given up (a half-open TCP connection would otherwise look alive for many minutes).
PING_TIMEOUT_MIN_SEC = 10.0
#: A ``job_finished`` not acknowledged this long after it was sent is sent again.
ACK_RESEND_SEC = 30.0
#: After the welcome, how long reports wait for the server's ``resume`` (sent right after
#: it) before going out unnumbered: a server older than ``resume`` never sends it.
RESUME_WAIT_SEC = 1.0
#: After the jobs of a stopping agent ended, how long it waits for their finish to be acked.
STOP_FLUSH_SEC = 5.0
#: How long a draining agent lets its running jobs finish before it hands them back.
DRAIN_TIMEOUT_SEC = 60.0
#: What ``draining`` says for a drain without a deadline (a self-update's, by default).
NO_DEADLINE_SEC = 1e9
#: While connected, a job's reporting waits (back-pressure) once this many are queued.
HIGH_WATER_UNITS = 2_000
#: A job placed while its GPUs are still held by an ending job waits the grace period and
#: this long for them before it is handed back (``_plan_waiting``).
GPU_WAIT_EXTRA_SEC = 5.0
#: Largest frame accepted from the server (a ``run`` may carry inline files).
MAX_INCOMING_MESSAGE = 64 * 1024 * 1024


#: Capabilities of how jobs are kept apart: each attempt runs as a uid of its own; or the
#: jobs share one uid but the operator lets jobs of several orgs run at once
#: (``--shared-uid-ok``). A node with neither runs one org's jobs at a time (placement).
UID_PER_JOB = "uid-per-job"
SHARED_UID_OK = "shared-uid-ok"
UID_CAPABILITIES = frozenset({UID_PER_JOB, SHARED_UID_OK})


class _ProtocolViolation(Exception):
    pass


# --------------------------------------------------------------------------- small parts


def http_origin(server_url: str) -> str:
    """The server's http(s) origin (with its path prefix) from what the agent was given."""
    parts = urlsplit(server_url.strip())
    scheme = parts.scheme.lower()
    scheme = {"ws": "http", "wss": "https"}.get(scheme, scheme)
    path = parts.path.rstrip("/").removesuffix(CONNECT_PATH)
    return urlunsplit((scheme, parts.netloc, path, "", ""))


def connect_url(server_url: str) -> str:
    """The agent endpoint for a server URL: ``http://h:p/x`` -> ``ws://h:p/x/v1/nodes/connect``.

    ``https`` becomes ``wss``; ``ws``/``wss`` URLs are taken as they are (the path is added
    unless it is already there). Query and fragment are dropped.
    """
    parts = urlsplit(server_url.strip())
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme.lower())
    if scheme is None or not parts.hostname:
        raise ValueError(
            f"server URL must look like http://host:port or https://host, got {server_url!r}"
        )
    path = parts.path.rstrip("/")
    if not path.endswith(CONNECT_PATH):
        path += CONNECT_PATH
    return urlunsplit((scheme, parts.netloc, path, "", ""))


class _Changed:
    """Wake everyone waiting for *some* state change (they re-check their own condition)."""

    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()
        self._event = trio.Event()

    async def wait(self) -> None:
        await self._event.wait()


# --------------------------------------------------------------------------- the agent


def pod_services(pod: list[PodServiceSpec] | None) -> tuple[PodService, ...]:
    """A run order's pod as the executor takes it (empty for a plain job)."""
    return tuple(
        PodService(
            name=s.name,
            command=list(s.command),
            env=dict(s.env),
            needs=tuple(s.needs),
            health=(
                PodHealth(
                    command=list(s.health.command),
                    period_sec=s.health.period_sec,
                    timeout_sec=s.health.timeout_sec,
                    retries=s.health.retries,
                )
                if s.health is not None
                else None
            ),
        )
        for s in pod or ()
    )


@dataclass(eq=False, slots=True)
class _Job:
    job_id: str
    attempt: int
    workdir: Path
    cancel: trio.Event = field(default_factory=trio.Event)
    running_sent: bool = False
    finished: bool = False
    pids: set[int] = field(default_factory=set)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    #: stopped by a drain: handed back to the server instead of reported cancelled
    handed_back: bool = False
    #: its streams directory, once made (``streams.py``)
    streams: Path | None = None
    #: org secret values to mask in its reports (``mask.py``), longest first
    mask: tuple[str, ...] = ()
    #: who its processes run as: its own uid (``uids.py``), the one job user, or None
    user: JobUser | None = None

    @property
    def key(self) -> JobKey:
        return (self.job_id, self.attempt)


@dataclass(frozen=True, slots=True)
class AgentStatistics:
    connected: bool
    node_id: str | None
    welcomes: int  # successful hello/welcome exchanges
    connect_attempts: int
    running: tuple[JobKey, ...]
    queued_messages: int  # reports waiting to be sent
    unacked_finished: tuple[JobKey, ...]
    dropped_lines: int
    dropped_metrics: int
    last_error: str | None
    draining: bool = False
    dropped_chunks: int = 0  # stream chunks


@dataclass(slots=True)
class _Drain:
    """A drain in progress: running jobs are handed back at ``deadline`` (trio time), or
    at once when ``now`` is set (a second stop request)."""

    timeout: float
    deadline: float
    now: trio.Event = field(default_factory=trio.Event)
    #: False once the server showed it does not know ``draining`` (an older server)
    server_drains: bool = True


@dataclass(slots=True)
class _Session:
    ws: trio_websocket.WebSocketConnection
    heartbeat_sec: float
    closing: bool = False
    failure: BaseException | None = None
    draining_sent: bool = False
    #: the server said ``resume`` (reports resent, numbering on)
    resumed: trio.Event = field(default_factory=trio.Event)


_RETRYABLE = (
    trio_websocket.HandshakeError,
    trio_websocket.ConnectionClosed,
    OSError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
    _ProtocolViolation,
)


class Agent:
    """A node agent. ``await agent.run()`` runs it until cancelled or :meth:`request_stop`.

    ``run(task_status=...)`` reports started (with the node id) after the first welcome.
    Cancelling ``run()`` stops gracefully: running jobs are cancelled (SIGTERM, SIGKILL after
    ``grace_sec``), their finish is reported if the connection is up, the socket is closed;
    all of it bounded by ``stop_timeout``, after which what is left is SIGKILLed.
    A refusal by the server raises :class:`AgentRefused` (or :class:`AgentReplaced`) from
    ``run()``.
    """

    def __init__(
        self,
        server_url: str,
        data_dir: Path,
        *,
        join_token: str | None = None,
        name: str | None = None,
        max_concurrency: int | None = None,
        facts: Facts | None = None,
        extra_capabilities: Sequence[str] = (),
        grace_sec: float = 10.0,
        stop_timeout: float | None = None,
        drain_timeout: float = DRAIN_TIMEOUT_SEC,
        backoff_min: float = BACKOFF_MIN_SEC,
        backoff_max: float = BACKOFF_MAX_SEC,
        rng: random.Random | None = None,
        host_paths: Sequence[Path | str] = (),
        run_as: str | None = None,
        uid_range: str | UidRange | None = None,
        uid_lock_dir: Path | None = None,
        shared_uid_ok: bool = False,
        work_dir: Path | None = None,
        executor: str = "process",
        best_effort_limits: bool = False,
        enforce_limits: bool = True,
        auto_update: bool = False,
        self_update: bool = True,
        update_plan: updates.UpdatePlan | None = None,
        update_drain_timeout: float = math.inf,
    ) -> None:
        if executor not in EXECUTORS:
            raise ValueError(
                f"unknown executor {executor!r}; choose one of: {', '.join(EXECUTORS)}"
            )
        #: the servers to try, in turn (``--server URL[,URL...]``: the replicas of an HA
        #: deploy, any of which leads or proxies to the leader)
        self.servers = [u.strip() for u in server_url.split(",") if u.strip()]
        if not self.servers:
            raise ValueError("server URL must look like http://host:port, got nothing")
        for url in self.servers:
            connect_url(url)  # each is checked now: a typo fails at start, not at its turn
        self._server = 0
        self.data_dir = Path(data_dir)
        self.join_token = join_token or None
        self.name = name
        self.max_concurrency = max_concurrency
        self.extra_capabilities = [c.strip() for c in extra_capabilities if c.strip()]
        self.grace_sec = grace_sec
        if not drain_timeout >= 0:
            raise ValueError(f"drain timeout must be 0 or more seconds, got {drain_timeout}")
        self.drain_timeout = drain_timeout
        self._drain: _Drain | None = None
        self.stop_timeout = (
            stop_timeout if stop_timeout is not None else grace_sec + STOP_FLUSH_SEC + 5.0
        )
        self._facts = facts
        self._backoff = Backoff(backoff_min, backoff_max, rng)
        self._node_id: str | None = credentials.load_node_id(self.data_dir)
        self._credential: str | None = None
        self._outbox = Outbox()
        self._store = FinishStore(self.data_dir / "outbox")
        self._jobs: dict[JobKey, _Job] = {}
        self._jobs_nursery: trio.Nursery | None = None
        self._changed = _Changed()
        self._stop = trio.Event()
        self._welcomed = trio.Event()
        self._session: _Session | None = None
        self._handshake_scope: trio.CancelScope | None = None
        self._inner = trio.CancelScope(shield=True)
        self._ran = False
        self._welcomes = 0
        self._connect_attempts = 0
        self._last_error: str | None = None
        #: isolation (runplane/agent/isolation.py): settled when the agent starts
        self.allowed_host_paths = tuple(Path(p) for p in host_paths)
        self.run_as = run_as
        #: the uids a root agent gives its attempts (``uids.py``); None: the default range
        self.uid_range = UidRange.parse(uid_range) if isinstance(uid_range, str) else uid_range
        self.uid_lock_dir = uid_lock_dir
        #: jobs of several orgs may run here at once although they share one uid
        self.shared_uid_ok = shared_uid_ok
        self.work_dir = work_dir
        self._job_user: JobUser | None = None
        self._uids: UidPool | None = None
        self._work_root = self.data_dir / "jobs"
        self._host_paths = HostPaths()
        #: limits and executor (runplane/agent/jobplan.py): settled when the agent starts
        self.executor: Executor = "sandbox" if executor == "sandbox" else "process"
        self.best_effort_limits = best_effort_limits
        #: False: do not look for cgroups (tests of many agents in one process)
        self.enforce_limits = enforce_limits
        self._rules = NodeRules(node=name or "")
        #: self-update: apply channel targets unasked; how to install; how long the drain
        #: after an install waits for running jobs before handing them back
        self.auto_update = auto_update
        #: False: an ``update`` is answered ``failed`` (the local agent of ``runplane serve``)
        self.self_update = self_update
        self.update_plan = update_plan or (updates.plan_from_env() if self_update else None)
        if not update_drain_timeout >= 0:
            raise ValueError(f"update drain timeout must be 0 or more, got {update_drain_timeout}")
        self.update_drain_timeout = update_drain_timeout
        #: the version installed by a self-update: ``run()`` returned to be re-executed
        self.restart_into: str | None = None
        self._updating: trio.CancelScope | None = None
        self._update_report: UpdateStatus | None = None
        self._next_update: Update | None = None
        self._failed_updates: set[str] = set()

    # -- public

    @property
    def server_url(self) -> str:
        """The server this agent talks to now (it moves on to the next of ``servers``
        after a failed or lost connection)."""
        return self.servers[self._server]

    @property
    def url(self) -> str:
        """The WebSocket URL of ``server_url``."""
        return connect_url(self.server_url)

    @property
    def work_root(self) -> Path:
        """Where job working directories live (``<work root>/<job id>/<attempt>``); settled
        when the agent starts (``<data dir>/jobs`` until then)."""
        return self._work_root

    @property
    def job_user(self) -> JobUser | None:
        """The one user every job runs as (``--run-as``); None: the agent's own, or each
        attempt its own uid (:attr:`uids`). Settled when the agent starts."""
        return self._job_user

    @property
    def uids(self) -> UidPool | None:
        """The uids of the attempts of an agent running as root (None: jobs share one
        uid); settled when the agent starts."""
        return self._uids

    def uid_capabilities(self) -> list[str]:
        """What the agent reports of how its jobs are kept apart (placement reads it)."""
        if self._uids is not None:
            return [UID_PER_JOB]
        return [SHARED_UID_OK] if self.shared_uid_ok else []

    @property
    def node_id(self) -> str | None:
        """The node id of the last welcome (from the data dir before the first one)."""
        return self._node_id

    @property
    def facts(self) -> Facts | None:
        return self._facts

    def statistics(self) -> AgentStatistics:
        return AgentStatistics(
            connected=self._session is not None,
            node_id=self._node_id,
            welcomes=self._welcomes,
            connect_attempts=self._connect_attempts,
            running=tuple(self._jobs),
            queued_messages=self._outbox.pending(),
            unacked_finished=tuple(self._outbox.unacked()),
            dropped_lines=self._outbox.dropped_lines,
            dropped_metrics=self._outbox.dropped_metrics,
            last_error=self._last_error,
            draining=self._drain is not None,
            dropped_chunks=self._outbox.dropped_chunks,
        )

    def job_pids(self) -> set[int]:
        """Pids of the job processes the executor started and waits for (not to be reaped)."""
        return {pid for job in self._jobs.values() for pid in job.pids}

    def request_stop(self) -> None:
        """Stop gracefully (as cancelling ``run()`` does, but ``run()`` then returns)."""
        self._stop.set()
        if self._updating is not None:
            self._updating.cancel()  # an install in progress is abandoned (not applied)
        if self._handshake_scope is not None:
            self._handshake_scope.cancel()  # a connect attempt in progress is not worth waiting
        self._changed.notify()

    def drain(self, timeout: float | None = None) -> None:
        """Stop gracefully without cancelling jobs: take no new work (the server is told
        ``draining``; a ``run`` arriving now is handed back at once), let the running jobs
        finish for up to ``timeout`` seconds (default ``drain_timeout``; 0: not at all),
        then stop the ones left (SIGTERM, SIGKILL after ``grace_sec``, as a cancel) and
        hand them back (``job_released``: the server requeues them), then stop as
        :meth:`request_stop` does (``run()`` returns). Jobs that end meanwhile report their
        real outcome. A second call hands the running jobs back at once."""
        drain = self._drain
        if drain is not None:
            drain.now.set()
            self._changed.notify()
            return
        wait = self.drain_timeout if timeout is None else timeout
        if not wait >= 0:
            raise ValueError(f"drain timeout must be 0 or more seconds, got {wait}")
        self._drain = drain = _Drain(wait, trio.current_time() + wait)
        if self._jobs_nursery is not None:
            self._jobs_nursery.start_soon(self._drain_jobs, drain)
        self._changed.notify()

    def stop_now(self) -> None:
        """Stop at once: running jobs are SIGKILLed, nothing more is reported."""
        self.request_stop()
        self._inner.cancel()

    async def run(
        self, *, task_status: trio.TaskStatus[str | None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        if self._ran:
            raise RuntimeError("Agent.run() may be called only once")
        self._ran = True
        done = trio.Event()
        errors: list[Exception] = []
        # The agent itself runs shielded, so that a cancel of run() becomes a graceful stop
        # (the connection stays up to report the cancelled jobs) bounded by stop_timeout.
        inner = self._inner

        async def body() -> None:
            try:
                with inner:
                    await self._main()
            except Exception as exc:
                errors.append(exc)
            finally:
                done.set()
                self._changed.notify()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(body)
            try:
                while not (self._welcomed.is_set() or done.is_set()):
                    await self._changed.wait()
                if self._welcomed.is_set():
                    task_status.started(self._node_id)
                await done.wait()
            except BaseException:
                self.request_stop()
                with trio.CancelScope(shield=True):
                    with trio.move_on_after(self.stop_timeout):
                        await done.wait()
                    if not done.is_set():
                        log.warning(
                            "graceful stop timed out; killing what is left",
                            extra={"stop_timeout_sec": self.stop_timeout},
                        )
                    inner.cancel()
                    await done.wait()
                raise
        if errors:
            raise errors[0]

    # -- the body

    async def _main(self) -> None:
        try:
            credentials.ensure_data_dir(self.data_dir)
            lock_fd = self._lock_data_dir()
        except OSError as exc:
            raise AgentError(
                f"cannot use data dir {self.data_dir}: {exc.strerror or exc}"
            ) from None
        try:
            self._isolate()  # (blocking, once; no worker thread for autojump-clock tests)
        except RunAsError as exc:
            os.close(lock_fd)
            raise AgentError(str(exc)) from None
        except OSError as exc:
            os.close(lock_fd)
            where = f" ({exc.filename})" if exc.filename else ""
            raise AgentError(f"cannot set up job isolation: {exc.strerror or exc}{where}") from None
        try:
            await self._start_and_serve()
        finally:
            if self._uids is not None:
                self._uids.close()
            os.close(lock_fd)  # releases the lock
        log.info("agent stopped")

    def _isolate(self) -> None:
        """Settle who jobs run as, where their directories live and which node paths they
        may copy (``isolation.py``, ``uids.py``; blocking: sweeps what an earlier run of
        the agent left)."""
        user = resolve_job_user(self.run_as)
        pool: UidPool | None = None
        if os.geteuid() == 0 and not self.run_as:
            pool = UidPool(
                self.uid_range or UidRange.default(), self.uid_lock_dir or DEFAULT_LOCK_DIR
            )
            pool.check()
        if user is not None or pool is not None:
            protect_data_dir(self.data_dir, self.data_dir / credentials.CREDENTIAL_FILE)
        reaching = user if user is not None else pool.representative if pool else None
        self._work_root = prepare_work_root(self.data_dir, reaching, self.work_dir)
        self._job_user = user
        self._uids = pool
        self._host_paths = HostPaths.of(self.allowed_host_paths, [self.data_dir, self._work_root])
        if pool is not None:
            swept = pool.sweep_stale(self._work_root)
            if swept.killed or swept.removed or swept.handed_back:
                log.warning(
                    "swept what earlier jobs left under their uids",
                    extra={
                        "killed_processes": swept.killed,
                        "handed_back_files": swept.handed_back,
                        "removed_ipc": swept.removed,
                        "uids": swept.uids[:20],
                    },
                )
        fields = {
            "run_as": (
                f"a uid of its own per attempt ({pool.uids})"
                if pool is not None
                else user.name
                if user is not None
                else "(the agent's own user)"
            ),
            "work_root": str(self._work_root),
            "host_paths": [str(p) for p in self._host_paths.allowed],
        }
        log.info("job isolation", extra=fields)
        if pool is None:
            who = user.name if user is not None else "the agent's own user"
            if os.geteuid() != 0:
                why = "the agent is not root: it cannot switch users"
            else:
                why = f"--run-as {self.run_as}"
            log.warning(
                f"every job runs as {who} ({why}): a job can read another running job's "
                "environment and files and signal its processes; "
                + (
                    "jobs of several orgs may still run here at once (--shared-uid-ok)"
                    if self.shared_uid_ok
                    else "placement runs the jobs of one org at a time here "
                    "(--shared-uid-ok allows several)"
                ),
                extra={"shared_uid": True},
            )
        if user is None and pool is None and os.geteuid() == 0:
            log.warning("jobs run as root (--run-as root): they can read the node credential")
        self._settle_limits(user if user is not None else pool.representative if pool else None)

    def _settle_limits(self, user: JobUser | None) -> None:
        """Find what this node enforces and how its jobs start (blocking: probes)."""
        enforcement = probe(want_cgroups=self.enforce_limits)
        if self.executor == "sandbox" and enforcement.bwrap is None:
            raise RunAsError(
                "--executor sandbox needs bubblewrap able to create namespaces here "
                "(apt-get install bubblewrap; in a container, allow user namespaces)"
            )
        setpriv = find_setpriv()
        wraps = enforcement.cgroups is not None or enforcement.bwrap is not None
        if user is not None and wraps and setpriv is None:
            raise RunAsError(
                f"running jobs as {user.name} with limits needs setpriv (util-linux) on PATH"
            )
        if self._uids is not None:
            user = None  # each attempt's own, put in its launch (_attempt_user)
        self._rules = NodeRules(
            node=self.name or "",
            executor=self.executor,
            enforcement=enforcement,
            best_effort=self.best_effort_limits,
            user=user,
            hidden=tuple(
                dict.fromkeys((self.data_dir.absolute(), self._work_root, DEFAULT_WORK_PARENT))
            ),
            setpriv=setpriv or "setpriv",
        )
        cgroups = enforcement.cgroups
        log.info(
            "job limits",
            extra={
                "executor": self.executor,
                "cgroups": cgroups.version if cgroups else None,
                "controllers": sorted(cgroups.controllers) if cgroups else [],
                "bwrap": enforcement.bwrap,
                "capabilities": self._rules.capabilities(),
                "not_enforced": list(enforcement.notes),
                "best_effort": self.best_effort_limits,
            },
        )

    def _lock_data_dir(self) -> int:
        """Lock the data dir for this agent (``flock``: released when the fd is closed)."""
        fd = os.open(self.data_dir / "agent.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirBusy(f"another agent is running with data dir {self.data_dir}") from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    async def _start_and_serve(self) -> None:
        self._credential = credentials.load_credential(self.data_dir)
        for msg in self._store.load():
            self._outbox.put(msg)
        if self._facts is None:
            self._facts = await trio.to_thread.run_sync(
                collect_facts, self.data_dir, self.name, self.max_concurrency
            )
        update: dict[str, Any] = {}
        if self.name:
            update["name"] = self.name
        if self.max_concurrency:
            update["max_concurrency"] = self.max_concurrency
        claimed = [c for c in self.extra_capabilities if c not in UID_CAPABILITIES]
        if len(claimed) < len(self.extra_capabilities):
            log.warning(
                "capabilities about job uids are the agent's own to report: ignored",
                extra={"ignored": sorted(set(self.extra_capabilities) & UID_CAPABILITIES)},
            )
        wanted = [*self._rules.capabilities(), *self.uid_capabilities(), *claimed]
        reported = [c for c in self._facts.capabilities if c not in UID_CAPABILITIES]
        if reported != self._facts.capabilities:
            self._facts = self._facts.model_copy(update={"capabilities": reported})
        extra = [c for c in dict.fromkeys(wanted) if c not in self._facts.capabilities]
        if extra:
            update["capabilities"] = [*self._facts.capabilities, *extra]
        if self._facts.executors != [self.executor]:
            update["executors"] = [self.executor]
        if update:
            self._facts = self._facts.model_copy(update=update)
        self._rules.node = self._facts.name
        self._rules.gpus = GpuPool(self._facts.gpus)
        log.info(
            "agent starting",
            extra={
                "url": self.url,
                "data_dir": str(self.data_dir),
                "version": __version__,
                "enrolled": self._credential is not None,
                "facts": self._facts.model_dump(),
            },
        )
        fatal: AgentError | None = None
        try:
            async with trio.open_nursery() as jobs:
                self._jobs_nursery = jobs
                if self._drain is not None:  # asked to drain before it got here
                    jobs.start_soon(self._drain_jobs, self._drain)
                try:
                    await self._connect_loop()
                except AgentError as exc:
                    fatal = exc  # raised below, after the jobs ended (not in an exception group)
                finally:
                    self._cancel_jobs()
        finally:
            self._jobs_nursery = None
        if fatal is not None:
            raise fatal

    async def _wait_until(self, predicate: Callable[[], bool]) -> None:
        while not predicate():
            await self._changed.wait()

    def _cancel_jobs(self) -> None:
        for job in self._jobs.values():
            job.cancel.set()

    # -- draining

    async def _drain_jobs(self, drain: _Drain) -> None:
        """Wait for the running jobs until the deadline, hand back those left, then stop."""
        log.info(
            "draining",
            extra={
                # None: no deadline (a self-update's drain, by default)
                "drain_timeout_sec": drain.timeout if math.isfinite(drain.timeout) else None,
                "running": [list(k) for k in self._jobs],
            },
        )
        with trio.move_on_at(drain.deadline):
            await self._wait_until(lambda: not self._jobs or drain.now.is_set())
        if self._jobs:
            why = (
                "stop requested again"
                if drain.now.is_set()
                else f"drain timeout of {drain.timeout:g} s passed"
            )
            log.warning(
                "handing back running jobs",
                extra={"reason": why, "jobs": [list(k) for k in self._jobs]},
            )
            for job in list(self._jobs.values()):
                if job.handed_back or job.finished:  # a finished one reports its outcome
                    continue
                job.handed_back = True
                note = f"agent shutting down ({why}): stopping this attempt to hand it back"
                self._outbox.put(
                    JobLogs(job_id=job.job_id, attempt=job.attempt, lines=[("system", note)])
                )
                job.cancel.set()
            self._changed.notify()
            await self._wait_until(lambda: not self._jobs)
        log.info("drained")
        self.request_stop()

    def _hand_back(self, job_id: str, attempt: int) -> None:
        """Tell the server this attempt was stopped by the drain (it requeues the job)."""
        fields = {"job_id": job_id, "attempt": attempt}
        if self._drain is not None and not self._drain.server_drains:
            log.warning(
                "job handed back without telling the server (it does not know draining): "
                "it requeues the attempt when it declares this node lost",
                extra=fields,
            )
            return
        log.info("job handed back", extra=fields)
        self._outbox.put(JobReleased(job_id=job_id, attempt=attempt))
        self._changed.notify()

    async def _drain_notice(self, session: _Session) -> None:
        """Say ``draining`` on this connection once a drain started (again after a
        reconnect: a new session is placeable until it does)."""
        while self._drain is None:
            await self._changed.wait()
        drain = self._drain
        if not drain.server_drains:
            return
        left = 0.0 if drain.now.is_set() else max(0.0, drain.deadline - trio.current_time())
        left = min(left, NO_DEADLINE_SEC)  # a drain without a deadline (self-update)
        await session.ws.send_message(encode(Draining(deadline_sec=round(left, 3))))
        session.draining_sent = True

    def _check_drain_refused(self, session: _Session) -> None:
        """A server older than ``draining`` closes the session with 4400 when it gets one:
        then drain without telling it (no ``draining``, no ``job_released``)."""
        drain, exc = self._drain, session.failure
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
        dropped = self._outbox.drop_released()
        log.warning(
            "the server does not know draining (an older server): draining without it; "
            "jobs still running at the deadline are stopped and left for the server to "
            "requeue when it declares this node lost",
            extra={"close_reason": exc.reason.reason, "dropped_releases": dropped},
        )

    # -- connecting

    async def _connect_loop(self) -> None:
        backoff = self._backoff
        while not self._stop.is_set():
            self._connect_attempts += 1
            log.info("connecting", extra={"url": self.url, "attempt": backoff.attempts + 1})
            welcomes = self._welcomes
            try:
                with trio.CancelScope() as self._handshake_scope:
                    await self._connect(backoff)
            except _RETRYABLE as exc:
                self._last_error = _describe(exc)
                if self._welcomes > welcomes:
                    log.warning("connection lost", extra={"error": self._last_error})
                else:
                    log.warning("cannot connect", extra={"error": self._last_error})
            if self._stop.is_set():
                break
            self._server = (self._server + 1) % len(self.servers)
            delay = backoff.next_delay()
            log.info(
                "reconnecting",
                extra={"delay_sec": round(delay, 3), "retry": backoff.attempts, "url": self.url},
            )
            with trio.move_on_after(delay):
                await self._stop.wait()
        # Stopping while disconnected: the jobs were cancelled; their finish stays on disk
        # and is sent by the next agent run.
        self._cancel_jobs()
        await self._wait_until(lambda: not self._jobs)

    async def _connect(self, backoff: Backoff) -> None:
        try:
            async with trio_websocket.open_websocket_url(
                self.url,
                connect_timeout=CONNECT_TIMEOUT_SEC,
                disconnect_timeout=DISCONNECT_TIMEOUT_SEC,
                max_message_size=MAX_INCOMING_MESSAGE,
            ) as ws:
                await ws.send_message(encode(self._hello()))
                with trio.fail_after(WELCOME_TIMEOUT_SEC):
                    raw = await ws.get_message()
                refused = self._refused_by(raw)
                if refused is not None:
                    log.error(
                        "refused by server",
                        extra={"code": refused.code, "reason": refused.reason},
                    )
                    raise refused
                welcome = self._parse_welcome(raw)
                self._on_welcome(welcome)
                backoff.reset()
                await self._serve(ws, welcome)
        except trio_websocket.ConnectionRejected as exc:
            if exc.status_code in (401, 403, 426):
                reason = _rejection_reason(exc)
                log.error("refused by server", extra={"status": exc.status_code, "reason": reason})
                raise AgentRefused(None, reason) from None
            raise
        except trio_websocket.ConnectionClosed as exc:
            refusal = self._refusal(exc.reason)
            if refusal is None:
                raise
            log.error("refused by server", extra={"code": refusal.code, "reason": refusal.reason})
            raise refusal from None

    def _hello(self) -> Hello:
        assert self._facts is not None
        return Hello(
            protocol=PROTOCOL_VERSION,
            agent_version=__version__,
            credential=self._credential,
            join_token=None if self._credential else self.join_token,
            facts=self._facts,
            running=self._held(),
            channel="stable",
            auto_update=self.auto_update,
        )

    def _parse_welcome(self, raw: str | bytes) -> Welcome:
        try:
            msg = decode_server(raw)
        except ValidationError as exc:
            raise _ProtocolViolation(f"bad first message from the server: {exc}") from None
        if not isinstance(msg, Welcome):
            raise _ProtocolViolation(f"expected welcome, got {msg.type}")
        return msg

    def _on_welcome(self, welcome: Welcome) -> None:
        if welcome.protocol != PROTOCOL_VERSION:
            log.warning(
                "server speaks another protocol version",
                extra={"server": welcome.protocol, "agent": PROTOCOL_VERSION},
            )
        if welcome.credential and welcome.credential != self._credential:
            credentials.save_credential(self.data_dir, welcome.credential)
            enrolled = self._credential is None
            self._credential = welcome.credential
            log.info(
                "enrolled" if enrolled else "credential renewed",
                extra={
                    "node_id": welcome.node_id,
                    "credential_file": str(self.data_dir / credentials.CREDENTIAL_FILE),
                },
            )
        if welcome.node_id != self._node_id:
            credentials.save_node_id(self.data_dir, welcome.node_id)
        self._node_id = welcome.node_id
        self._handshake_scope = None  # from now on a stop is graceful, not a cancel
        self._welcomes += 1
        self._welcomed.set()
        log.info(
            "connected",
            extra={
                "node_id": welcome.node_id,
                "heartbeat_sec": welcome.heartbeat_sec,
                "holding": [list(k) for k in self._held_keys()],
            },
        )

    def _refused_by(self, raw: str | bytes) -> AgentRefused | None:
        """The refusal a server's ``refused`` message (its whole sentence) stands for."""
        try:
            msg = decode_server(raw)
        except ValidationError:
            return None  # _parse_welcome says what is wrong with it
        if not isinstance(msg, Refused):
            return None
        return self._refusal_of(msg.code, msg.reason.strip()) or AgentRefused(msg.code, msg.reason)

    def _refusal(self, reason: trio_websocket.CloseReason | None) -> AgentRefused | None:
        if reason is None:
            return None
        return self._refusal_of(reason.code, (reason.reason or "").strip())

    def _refusal_of(self, code: int, text: str) -> AgentRefused | None:
        if code == CLOSE_REPLACED:
            return AgentReplaced(
                code, text or "another agent connected as this node; this one stopped"
            )
        if code == CLOSE_UNAUTHORIZED:
            text = text or "the server refused this agent's credentials"
            if self._credential is not None:
                path = self.data_dir / credentials.CREDENTIAL_FILE
                text += (
                    f" (node credential from {path}; remove that file and enroll again "
                    "with --join-token)"
                )
            return AgentRefused(code, text)
        if code == CLOSE_UPGRADE_REQUIRED:
            return AgentRefused(
                code,
                text
                or f"the server does not support agent protocol {PROTOCOL_VERSION} "
                f"(runplane {__version__}): upgrade the agent",
            )
        if code == CLOSE_DISABLED:
            return AgentRefused(code, text or "the server does not accept node agents")
        return None

    # -- one connection

    async def _serve(self, ws: trio_websocket.WebSocketConnection, welcome: Welcome) -> None:
        session = _Session(ws, max(0.05, min(welcome.heartbeat_sec, 300.0)))
        self._session = session
        self._outbox.numbering = False  # until this server says resume
        self._outbox.requeue_unacked()
        if self._update_report is not None:  # the last word on a self-update, said again
            self._outbox.put_control(self._update_report)
        self._changed.notify()
        try:
            async with trio.open_nursery() as nursery:

                async def guard(fn: Callable[[_Session], Any]) -> None:
                    try:
                        await fn(session)
                    except _RETRYABLE as exc:
                        if session.failure is None and not session.closing:
                            session.failure = exc
                        nursery.cancel_scope.cancel()

                for fn in (
                    self._receive_loop,
                    self._send_loop,
                    self._heartbeat_loop,
                    self._ping_loop,
                    self._resend_loop,
                    self._drain_notice,
                ):
                    nursery.start_soon(guard, fn)

                async def stop_watch() -> None:
                    await self._stop.wait()
                    await self._stop_session(session)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(stop_watch)
        finally:
            self._session = None
            self._outbox.clear_control()  # answers to this session: not for the next
            self._changed.notify()
        if session.failure is not None:
            self._check_drain_refused(session)
            raise session.failure

    async def _stop_session(self, session: _Session) -> None:
        running = len(self._jobs)
        log.info("stopping", extra={"cancelling_jobs": running})
        self._cancel_jobs()
        await self._wait_until(lambda: not self._jobs)
        with trio.move_on_after(STOP_FLUSH_SEC):
            await self._wait_until(
                lambda: (
                    (self._outbox.empty() and not self._outbox.unacked())
                    or session.failure is not None
                )
            )
        session.closing = True
        with trio.CancelScope(shield=True), trio.move_on_after(DISCONNECT_TIMEOUT_SEC):
            await session.ws.aclose(1000, "agent stopping")

    async def _receive_loop(self, session: _Session) -> None:
        while True:
            raw = await session.ws.get_message()
            try:
                msg = decode_server(raw)
            except ValidationError as exc:
                log.warning("ignored a server message", extra={"error": str(exc)[:500]})
                continue
            if isinstance(msg, Run):
                self._on_run(msg)
            elif isinstance(msg, Cancel):
                self._on_cancel(msg)
            elif isinstance(msg, FinishedAck):
                self._on_ack(msg)
            elif isinstance(msg, Teleop):
                self._on_teleop(msg)
            elif isinstance(msg, Update):
                self._on_update(msg)
            elif isinstance(msg, Resume):
                self._on_resume(msg, session)
            else:
                log.warning("ignored a second welcome")

    async def _send_loop(self, session: _Session) -> None:
        # a server that resends nothing (it predates ``resume``) is not waited for longer
        with trio.move_on_after(RESUME_WAIT_SEC):
            await session.resumed.wait()
        while True:
            head = self._outbox.head()
            if head is None:
                await self._changed.wait()
                continue
            _, messages = head
            for msg in messages:
                await session.ws.send_message(encode(msg))
            self._outbox.sent(trio.current_time())
            self._changed.notify()

    async def _heartbeat_loop(self, session: _Session) -> None:
        while True:
            await trio.sleep(session.heartbeat_sec)
            await session.ws.send_message(encode(Heartbeat(running=self._held())))

    async def _ping_loop(self, session: _Session) -> None:
        interval = max(1.0, 2 * session.heartbeat_sec)
        timeout = max(PING_TIMEOUT_MIN_SEC, 3 * session.heartbeat_sec)
        while True:
            await trio.sleep(interval)
            try:
                with trio.fail_after(timeout):
                    await session.ws.ping()
            except trio.TooSlowError:
                log.warning("server did not answer a ping", extra={"timeout_sec": timeout})
                raise

    async def _resend_loop(self, session: _Session) -> None:
        while True:
            await trio.sleep(ACK_RESEND_SEC / 2)
            count = self._outbox.requeue_unacked(sent_before=trio.current_time() - ACK_RESEND_SEC)
            if count:
                log.info("resending unacknowledged job_finished", extra={"count": count})
                self._changed.notify()

    # -- what the agent holds

    def _held_keys(self) -> list[JobKey]:
        keys = list(self._jobs)
        keys.extend(k for k in self._outbox.unacked() if k not in self._jobs)
        return keys

    def _held(self) -> list[RunningJob]:
        """Running jobs and finished ones whose finish the server has not acknowledged yet."""
        return [RunningJob(job_id=j, attempt=a) for j, a in self._held_keys()]

    # -- server messages

    def _on_resume(self, msg: Resume, session: _Session) -> None:
        marks = {(m.job_id, m.attempt): m.n for m in msg.marks}
        count = self._outbox.resume(marks)
        self._outbox.numbering = True
        session.resumed.set()
        if count:
            log.info("resending reports the server did not store", extra={"count": count})
        self._changed.notify()

    def _on_run(self, msg: Run) -> None:
        key = job_key(msg)
        fields = {"job_id": msg.job_id, "attempt": msg.attempt}
        if self._stop.is_set() or self._jobs_nursery is None:
            log.warning("run ignored: the agent is stopping", extra=fields)
            return
        if key in self._jobs:
            log.info("run ignored: this attempt is already running", extra=fields)
            return
        if self._outbox.is_unacked(key):
            log.info("run ignored: this attempt already finished", extra=fields)
            return
        if self._drain is not None:
            log.info("run not started: the agent is draining", extra=fields)
            self._hand_back(msg.job_id, msg.attempt)
            return
        problem = check_job_ref(msg.job_id, msg.attempt)
        if problem is not None:
            log.warning("run refused", extra={**fields, "error": problem})
            self._finish(
                JobFinished(job_id=msg.job_id, attempt=msg.attempt, outcome="failed", error=problem)
            )
            return
        limit = self._facts.max_concurrency if self._facts is not None else 1
        if len(self._jobs) >= limit:
            log.warning(
                "running more jobs than max_concurrency",
                extra={**fields, "running": len(self._jobs) + 1, "max_concurrency": limit},
            )
        workdir = self._work_root / msg.job_id / str(msg.attempt)
        job = _Job(msg.job_id, msg.attempt, workdir, mask=tuple(msg.spec.mask or ()))
        self._jobs[key] = job
        self._changed.notify()
        self._jobs_nursery.start_soon(self._run_job, job, msg.spec)

    def _on_cancel(self, msg: Cancel) -> None:
        fields = {"job_id": msg.job_id, "attempt": msg.attempt}
        job = self._jobs.get(job_key(msg))
        if job is None:
            log.info("cancel ignored: attempt not running", extra=fields)
            return
        log.info("cancelling job", extra=fields)
        job.cancel.set()

    def _on_teleop(self, msg: Teleop) -> None:
        """Append the frame to the job's ``.teleop`` file (a small local write, inline, so a
        job's frames stay in order) and answer ``teleop_ack``."""
        job = self._jobs.get(job_key(msg))
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
        self._outbox.put_control(ack)
        self._changed.notify()

    # -- self-update

    def _on_update(self, msg: Update) -> None:
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
        elif self._drain is not None or self._stop.is_set():
            log.info("update offered, not applied: the agent is stopping", extra=fields)
        elif self._updating is not None:
            # the latest offer waits for the install in progress (tried if that one fails)
            log.info("update offered while installing another: next", extra=fields)
            self._next_update = msg
        elif msg.version in self._failed_updates and not msg.requested:
            log.info("update offered, not applied: it failed before", extra=fields)
        elif self._jobs_nursery is not None:
            self._updating = trio.CancelScope()
            self._jobs_nursery.start_soon(self._self_update, msg.version, self._updating)

    def _report_update(self, status: UpdateStatus) -> None:
        self._update_report = status
        self._outbox.put_control(status)
        self._changed.notify()

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
                self._on_update(following)
            return
        self._report_update(UpdateStatus(version=version, phase="installed"))
        log.info(
            "self-update installed: draining, then restarting",
            extra={"version": version, "running": [list(k) for k in self._jobs]},
        )
        self.restart_into = version
        self.drain(self.update_drain_timeout)

    def _on_ack(self, msg: FinishedAck) -> None:
        key = job_key(msg)
        if self._outbox.ack(key):
            self._store.delete(key)
            self._changed.notify()

    # -- jobs

    def _finish(self, msg: JobFinished) -> None:
        self._store.save(msg)
        self._outbox.put(msg)
        self._changed.notify()

    async def _emit(self, job: _Job, msg: Queued) -> None:
        self._outbox.put(masked(msg, job.mask))
        self._changed.notify()
        # Back-pressure while connected; while disconnected the outbox drops the oldest.
        await self._wait_until(
            lambda: self._session is None or self._outbox.units(job.key) <= HIGH_WATER_UNITS
        )

    async def _on_event(self, job: _Job, event: Event) -> None:
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
                self._hand_back(job.job_id, job.attempt)
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
            self._finish(
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

    def _node_name(self) -> str:
        if self._facts is not None:
            return self._facts.name
        return self.name or self._node_id or "?"

    async def _system(self, job: _Job, line: str) -> None:
        await self._emit(
            job, JobLogs(job_id=job.job_id, attempt=job.attempt, lines=[("system", line)])
        )

    async def _prepare(self, job: _Job, spec: RunSpec) -> Finished | None:
        """Put the run's mounts in place (phase ``pulling``); a Finished when that failed,
        was cancelled or timed out (``timeout_sec`` bounds it, as it bounds the command)."""
        mounts = mounts_of(spec.workspace, list(spec.inputs))
        if not mounts:
            return None
        started = trio.current_time()
        scratch = job.workdir.with_name(f"{job.workdir.name}.pull")
        outcome: Finished | None = None
        async with trio.open_nursery() as nursery:

            async def watch_cancel() -> None:
                nonlocal outcome
                await job.cancel.wait()
                outcome = Finished("cancelled", None, "cancelled while preparing mounts", {}, 0)
                nursery.cancel_scope.cancel()

            nursery.start_soon(watch_cancel)
            timeout = spec.timeout_sec if spec.timeout_sec and spec.timeout_sec > 0 else math.inf
            with trio.move_on_after(timeout) as deadline:
                try:
                    await prepare_mounts(
                        job.workdir,
                        mounts,
                        scratch=scratch,
                        note=lambda s: self._system(job, s),
                        host_paths=self._host_paths,
                        server=http_origin(self.server_url),
                    )
                except MountError as exc:
                    outcome = Finished("failed", None, str(exc), {}, 0)
            if deadline.cancelled_caught:
                outcome = Finished(
                    "timeout", None, f"timed out after {timeout:g} s while preparing mounts", {}, 0
                )
            nursery.cancel_scope.cancel()
        if outcome is not None:
            outcome = replace(outcome, duration_sec=trio.current_time() - started)
            await self._system(job, f"{outcome.error}")
        return outcome

    async def _outputs(self, job: _Job, spec: RunSpec, finished: Finished) -> Finished:
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
                    self.server_url,
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

    async def _run_job(self, job: _Job, spec: RunSpec) -> None:
        ids = {"job_id": job.job_id, "attempt": job.attempt}
        log.info("job started", extra={**ids, "workdir": str(job.workdir)})
        try:
            plan = await self._plan_waiting(job, spec)
            if plan.hand_back is not None and job.cancel.is_set():
                await self._on_event(job, Finished("cancelled", None, "cancelled", {}, 0))
                return
            if plan.hand_back is not None:
                log.info("job declined", extra={**ids, "reason": plan.hand_back})
                self._outbox.put(
                    JobReleased(job_id=job.job_id, attempt=job.attempt, declined=plan.hand_back)
                )
                self._changed.notify()
                return
            gpus = [d.id for d in plan.gpus]
            await self._emit(
                job,
                JobPhase(job_id=job.job_id, attempt=job.attempt, phase="pulling", gpus=gpus),
            )
            refusal = isolation_refusal(spec.isolation, self._node_name(), self.executor)
            refusal = refusal or plan.refusal
            if refusal is not None:
                await self._system(job, refusal)
                await self._on_event(job, Finished("failed", None, refusal, {}, 0))
                return
            if gpus:
                await self._system(job, f"GPUs assigned: {', '.join(gpus)}")
            for note in plan.notes:
                await self._system(job, note)
            job.user = await self._attempt_user(job)
            if self._uids is not None and plan.launch is not None:
                plan.launch = replace(plan.launch, user=job.user)
            await trio.to_thread.run_sync(make_workdir, job.workdir, self._work_root)
            job.streams = await trio.to_thread.run_sync(make_streams_dir, job.workdir, job.user)
            failed = await self._prepare(job, spec)
            if failed is not None:
                await self._on_event(job, failed)
                return
            exec_spec = ExecSpec(
                job_id=job.job_id,
                command=list(spec.command),
                env={**spec.env, **plan.env},
                workdir=job.workdir,
                setup=spec.setup,
                timeout_sec=spec.timeout_sec,
                # inline mounts were written by _prepare (with their mode); the bare
                # inline_files of older servers are still written by the executor
                inline_files={} if (spec.workspace or spec.inputs) else dict(spec.inline_files),
                grace_sec=self.grace_sec,
                user=job.user,
                launch=plan.launch,
                streams_dir=job.streams,
                pod=pod_services(spec.pod),
            )

            async def report(event: Event) -> None:
                if not isinstance(event, Finished):  # reported after the outputs are up
                    await self._on_event(job, event)

            async with forwarding(
                job.streams,
                lambda msg: self._emit(job, msg),
                job_id=job.job_id,
                attempt=job.attempt,
                note=lambda s: self._system(job, s),
                owner=job.user.uid if job.user is not None else None,
            ):
                finished = await run_job(exec_spec, report, job.cancel)
            await self._on_event(job, await self._outputs(job, spec, finished))
        except Exception as exc:
            log.exception("job failed inside the agent", extra=ids)
            if not job.finished:
                job.finished = True
                self._finish(
                    JobFinished(
                        job_id=job.job_id,
                        attempt=job.attempt,
                        outcome="failed",
                        error=f"agent error: {exc}",
                    )
                )
        finally:
            self._rules.release(job.key)
            del self._jobs[job.key]
            self._changed.notify()
            await self._free_user(job)

    async def _attempt_user(self, job: _Job) -> JobUser | None:
        """Who the attempt's processes run as: a uid of its own (held until
        :meth:`_free_user`), or the one user of every job."""
        if self._uids is None:
            return self._job_user
        user = await trio.to_thread.run_sync(self._uids.take, job.key)
        log.info(
            "job uid taken", extra={"job_id": job.job_id, "attempt": job.attempt, "uid": user.uid}
        )
        return user

    async def _free_user(self, job: _Job) -> None:
        """Give the attempt's uid back once its every process is gone; its directories
        are handed back to the agent first (``uids.py``). Shielded: an agent stopping at
        once still frees it (what a killed agent leaves is swept at its next start)."""
        pool = self._uids
        if pool is None or pool.uid_of(job.key) is None:
            return
        own = [
            job.workdir,
            *(job.workdir.with_name(f"{job.workdir.name}{s}") for s in (".deps", ".streams")),
        ]
        with trio.CancelScope(shield=True):
            released = await trio.to_thread.run_sync(pool.release, job.key, own)
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

    async def _plan_waiting(self, job: _Job, spec: RunSpec) -> JobPlan:
        """:meth:`_plan`, waiting a while for GPUs still held by a job that is ending: the
        server frees a cancelled job's reservation at once, the agent its devices once its
        processes are gone (up to the grace period later). Still none free after that:
        the plan says to hand the job back."""
        plan = self._plan(job, spec)
        if plan.hand_back is None:
            return plan
        with trio.move_on_after(self.grace_sec + GPU_WAIT_EXTRA_SEC):
            while plan.hand_back is not None and not job.cancel.is_set():
                await self._changed.wait()
                plan = self._plan(job, spec)
        return plan

    def _plan(self, job: _Job, spec: RunSpec) -> JobPlan:
        """Limits, GPUs and the launch of this attempt (``jobplan.py``)."""
        read_only = tuple(
            job.workdir / m.path
            for m in (spec.workspace, *spec.inputs)
            if m and m.mode == "ro" and m.path
        )
        return self._rules.plan(job.key, spec.limits, read_only)


def _rejection_reason(exc: trio_websocket.ConnectionRejected) -> str:
    body = (exc.body or b"").decode("utf-8", errors="replace").strip()
    with contextlib.suppress(ValueError, AttributeError):
        data = json.loads(body)
        body = str(data.get("detail") or data.get("title") or body)
    return f"server refused the connection (HTTP {exc.status_code}): {body[:300] or 'no reason'}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, trio_websocket.ConnectionClosed):
        reason = exc.reason
        if reason is None:
            return "connection closed"
        return f"closed with {reason.code} ({reason.name}): {reason.reason or ''}".rstrip(": ")
    if isinstance(exc, trio_websocket.ConnectionRejected):
        return f"rejected with HTTP {exc.status_code}"
    if isinstance(exc, trio_websocket.HandshakeError) and exc.__cause__ is not None:
        return f"{type(exc.__cause__).__name__}: {exc.__cause__}"
    if isinstance(exc, trio.TooSlowError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"
