"""The node agent: one WebSocket to the server, jobs run on this node for real.

:class:`Agent` wires its three parts over the state they share (``core.py``):

* the **session** (``session.py``): connects to ``ws(s)://<server>/v1/nodes/connect``,
  says ``hello`` (credential or join token, facts, the jobs it holds), heartbeats, sends
  the reports, reconnects with exponential backoff (:mod:`runplane.agent.backoff`) and
  moves on to the next server of ``--server URL,URL`` after a failed connection;
* the **job runner** (``runner.py``): runs the ``run`` messages it gets with
  :func:`runplane.agent.executor.run_job` and reports what they do. The connection may
  drop at any time: jobs keep running, their reports wait in the
  :class:`~runplane.agent.outbox.Outbox` (bounded), and ``job_finished`` messages are
  kept (also on disk, :mod:`runplane.agent.finish_store`) until the server acknowledges
  them;
* the **lifecycle** (``lifecycle.py``): :meth:`Agent.drain` (SIGTERM for ``runplane
  agent``) stops it gracefully without turning its jobs into cancels: it says
  ``draining``, lets the running jobs finish for up to ``drain_timeout`` seconds, then
  stops the ones left and hands them back (``job_released``: the server requeues them).
  Self-update (``update`` from the server, :mod:`runplane.agent.update`): the agent
  installs the offered version while its jobs run, reports ``update_status``, and once
  the install took it drains and stops with :attr:`Agent.restart_into` set: ``runplane
  agent`` then re-executes itself.

What the node enforces and who jobs run as is settled once at start (``setup.py``). See
``docs/agent.md``. The same class runs as its own process (``runplane agent``,
:mod:`runplane.agent.main`) and inside the server's nursery as the local agent.
"""

from __future__ import annotations

import fcntl
import logging
import math
import os
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Unpack

import trio

from runplane import __version__
from runplane.agent import credentials
from runplane.agent import update as updates
from runplane.agent.backoff import BACKOFF_MAX_SEC, BACKOFF_MIN_SEC, Backoff
from runplane.agent.core import Core
from runplane.agent.errors import AgentError, DataDirBusy
from runplane.agent.facts import collect_facts
from runplane.agent.gpus import GpuPool
from runplane.agent.images.store import DEFAULT_CACHE_GB, ImageStore
from runplane.agent.isolation import JobUser, RunAsError, release_work_root
from runplane.agent.jobplan import EXECUTORS
from runplane.agent.jobref import JobKey
from runplane.agent.lifecycle import Lifecycle
from runplane.agent.protocol import Facts
from runplane.agent.runner import JobRunner
from runplane.agent.session import STOP_FLUSH_SEC, AgentSession
from runplane.agent.setup import (
    SHARED_UID_OK,
    UID_CAPABILITIES,
    UID_PER_JOB,
    SetupFlags,
    reported_capabilities,
    settle,
    setup_options,
)
from runplane.agent.uids import UidPool
from runplane.agent.urls import connect_url, http_origin

log = logging.getLogger("runplane.agent")

#: How long a draining agent lets its running jobs finish before it hands them back.
DRAIN_TIMEOUT_SEC = 60.0

__all__ = [
    "DRAIN_TIMEOUT_SEC",
    "SHARED_UID_OK",
    "UID_CAPABILITIES",
    "UID_PER_JOB",
    "Agent",
    "AgentStatistics",
    "connect_url",
    "http_origin",
]


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


def _checked(
    server_url: str, executor: str, drain_timeout: float, update_drain_timeout: float
) -> list[str]:
    """The servers to try, in turn (``--server URL[,URL...]``: the replicas of an HA deploy,
    any of which leads or proxies to the leader), each checked now (a typo fails at start,
    not at its turn), as are the executor and the drain timeouts: ValueError."""
    if executor not in EXECUTORS:
        raise ValueError(f"unknown executor {executor!r}; choose one of: {', '.join(EXECUTORS)}")
    servers = [u.strip() for u in server_url.split(",") if u.strip()]
    if not servers:
        raise ValueError("server URL must look like http://host:port, got nothing")
    for url in servers:
        connect_url(url)  # each is checked now: a typo fails at start, not at its turn
    for what, value in (
        ("drain timeout", drain_timeout),
        ("update drain timeout", update_drain_timeout),
    ):
        if not value >= 0:
            raise ValueError(f"{what} must be 0 or more seconds, got {value}")
    return servers


class Agent:
    """A node agent. ``await agent.run()`` runs it until cancelled or :meth:`request_stop`.

    ``run(task_status=...)`` reports started (with the node id) after the first welcome.
    Cancelling ``run()`` stops gracefully: running jobs are cancelled (SIGTERM, SIGKILL after
    ``grace_sec``), their finish is reported if the connection is up, the socket is closed;
    all of it bounded by ``stop_timeout``, after which what is left is SIGKILLed.
    A refusal by the server raises :class:`AgentRefused` (or :class:`AgentReplaced`) from
    ``run()``. With ``executor="container"``, jobs with an image run in it, from the image
    cache in ``<data dir>/images`` of at most ``image_cache_gb`` GiB (``images/store.py``).
    """

    def __init__(
        self,
        server_url: str,
        data_dir: Path,
        *,
        join_token: str | None = None,
        name: str | None = None,
        max_concurrency: int | None = None,
        cpu_cores: int | None = None,
        facts: Facts | None = None,
        extra_capabilities: Sequence[str] = (),
        grace_sec: float = 10.0,
        stop_timeout: float | None = None,
        drain_timeout: float = DRAIN_TIMEOUT_SEC,
        backoff_min: float = BACKOFF_MIN_SEC,
        backoff_max: float = BACKOFF_MAX_SEC,
        rng: random.Random | None = None,
        executor: str = "process",
        auto_update: bool = False,
        self_update: bool = True,
        update_plan: updates.UpdatePlan | None = None,
        update_drain_timeout: float = math.inf,
        image_cache_gb: float = DEFAULT_CACHE_GB,
        advertise_address: str | None = None,
        **setup: Unpack[SetupFlags],
    ) -> None:
        servers = _checked(server_url, executor, drain_timeout, update_drain_timeout)
        if not image_cache_gb > 0:
            raise ValueError(f"the image cache must be more than 0 GB, got {image_cache_gb}")
        self.data_dir = Path(data_dir)
        self.name = name
        self.max_concurrency = max_concurrency
        #: the cores offered to placement (None: those counted; more oversubscribes them)
        self.cpu_cores = cpu_cores
        self.advertise_address = advertise_address  # how other nodes reach it (gangs)
        self.extra_capabilities = [c.strip() for c in extra_capabilities if c.strip()]
        self.grace_sec = grace_sec
        self.stop_timeout = (
            stop_timeout if stop_timeout is not None else grace_sec + STOP_FLUSH_SEC + 5.0
        )
        self.options = setup_options(self.data_dir, name, executor, setup)
        self.core = Core(self.data_dir, name)
        self.core.facts = facts
        self.core.node_id = credentials.load_node_id(self.data_dir)
        self._assemble(
            servers,
            join_token,
            Backoff(backoff_min, backoff_max, rng),
            drain_timeout=drain_timeout,
            auto_update=auto_update,
            self_update=self_update,
            update_plan=update_plan,
            update_drain_timeout=update_drain_timeout,
        )
        if executor == "container":
            self.runner.images = ImageStore(self.data_dir / "images", int(image_cache_gb * 1024**3))
        self._inner = trio.CancelScope(shield=True)
        self._ran = False
        self._capabilities: list[str] = []

    def _assemble(
        self,
        servers: list[str],
        join_token: str | None,
        backoff: Backoff,
        *,
        drain_timeout: float,
        auto_update: bool,
        self_update: bool,
        update_plan: updates.UpdatePlan | None,
        update_drain_timeout: float,
    ) -> None:
        """The agent's three parts on its shared core: the lifecycle (drain, self-update),
        the job runner and the session (the connection to the servers)."""
        self.lifecycle = Lifecycle(
            self.core,
            request_stop=self.request_stop,
            drain_timeout=drain_timeout,
            auto_update=auto_update,
            self_update=self_update,
            update_plan=update_plan or (updates.plan_from_env() if self_update else None),
            update_drain_timeout=update_drain_timeout,
        )
        self.runner = JobRunner(
            self.core,
            server_url=lambda: self.session.server_url,
            hand_back=self.lifecycle.hand_back,
            grace_sec=self.grace_sec,
            executor=self.options.executor,
            work_root=self.data_dir / "jobs",
        )
        self.session = AgentSession(
            self.core,
            self.runner,
            self.lifecycle,
            servers=servers,
            data_dir=self.data_dir,
            join_token=join_token or None,
            auto_update=auto_update,
            backoff=backoff,
        )

    # -- public

    @property
    def servers(self) -> list[str]:
        return self.session.servers

    @property
    def server_url(self) -> str:
        """The server this agent talks to now (it moves on to the next of ``servers``
        after a failed or lost connection)."""
        return self.session.server_url

    @property
    def url(self) -> str:
        """The WebSocket URL of ``server_url``."""
        return self.session.url

    @property
    def work_root(self) -> Path:
        """Where job working directories live (``<work root>/<job id>/<attempt>``); settled
        when the agent starts (``<data dir>/jobs`` until then)."""
        return self.runner.work_root

    @property
    def job_user(self) -> JobUser | None:
        """The one user every job runs as (``--run-as``); None: the agent's own, or each
        attempt its own uid (:attr:`uids`). Settled when the agent starts."""
        return self.runner.job_user

    @property
    def uids(self) -> UidPool | None:
        """The uids of the attempts of an agent running as root (None: jobs share one
        uid); settled when the agent starts."""
        return self.runner.uids

    def uid_capabilities(self) -> list[str]:
        """What the agent reports of how its jobs are kept apart (placement reads it)."""
        return [c for c in self._capabilities if c in UID_CAPABILITIES]

    @property
    def node_id(self) -> str | None:
        """The node id of the last welcome (from the data dir before the first one)."""
        return self.core.node_id

    @property
    def facts(self) -> Facts | None:
        return self.core.facts

    @property
    def restart_into(self) -> str | None:
        """The version installed by a self-update: ``run()`` returned to be re-executed."""
        return self.lifecycle.restart_into

    def statistics(self) -> AgentStatistics:
        core, session = self.core, self.session
        return AgentStatistics(
            connected=core.connected,
            node_id=core.node_id,
            welcomes=session.welcomes,
            connect_attempts=session.connect_attempts,
            running=tuple(core.jobs),
            queued_messages=core.outbox.pending(),
            unacked_finished=tuple(core.outbox.unacked()),
            dropped_lines=core.outbox.dropped_lines,
            dropped_metrics=core.outbox.dropped_metrics,
            last_error=session.last_error,
            draining=core.drain is not None,
            dropped_chunks=core.outbox.dropped_chunks,
        )

    def job_pids(self) -> set[int]:
        """Pids of the job processes the executor started and waits for (not to be reaped)."""
        return self.runner.job_pids()

    def request_stop(self) -> None:
        """Stop gracefully (as cancelling ``run()`` does, but ``run()`` then returns)."""
        self.core.stop.set()
        self.lifecycle.abandon_update()  # an install in progress is not applied
        if self.session.handshake_scope is not None:
            self.session.handshake_scope.cancel()  # a connect attempt is not worth waiting
        self.core.notify()

    def drain(self, timeout: float | None = None) -> None:
        """Stop gracefully without cancelling jobs (default ``drain_timeout``; a second
        call hands the running jobs back at once): see :meth:`Lifecycle.drain`."""
        self.lifecycle.drain(timeout)

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
                self.core.notify()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(body)
            try:
                welcomed = self.session.welcomed
                await self.core.wait_until(lambda: welcomed.is_set() or done.is_set())
                if welcomed.is_set():
                    task_status.started(self.core.node_id)
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
            self._settle()  # (blocking, once; no worker thread for autojump-clock tests)
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
            if self.runner.uids is not None:
                self.runner.uids.close()
            release_work_root(self.runner.work_root, self.data_dir)
            os.close(lock_fd)  # releases the lock
        log.info("agent stopped")

    def _settle(self) -> None:
        """Who jobs run as, where, and what the node enforces (``setup.py``)."""
        node = settle(self.options)
        runner = self.runner
        runner.work_root, runner.host_paths, runner.rules = (
            node.work_root,
            node.host_paths,
            node.rules,
        )
        runner.job_user, runner.uids = node.job_user, node.uids
        self._capabilities = [*node.rules.capabilities(), *node.capabilities]

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
        core = self.core
        self.session.credential = credentials.load_credential(self.data_dir)
        for msg in core.finishes.load():
            core.outbox.put(msg)
        facts = core.facts
        if facts is None:
            facts = await trio.to_thread.run_sync(
                collect_facts, self.data_dir, self.name, self.max_concurrency
            )
        core.facts = facts = self._reported(facts)
        await self._open_images()
        self.runner.rules.node = facts.name
        self.runner.rules.gpus = GpuPool(facts.gpus)
        log.info(
            "agent starting",
            extra={
                "url": self.url,
                "data_dir": str(self.data_dir),
                "version": __version__,
                "enrolled": self.session.credential is not None,
                "facts": facts.model_dump(),
            },
        )
        fatal: AgentError | None = None
        try:
            async with trio.open_nursery() as jobs:
                self.runner.nursery = jobs
                self.lifecycle.serving(jobs)
                ticking = trio.CancelScope()
                jobs.start_soon(_within, ticking, core.freeze.tick_forever)
                try:
                    await self.session.connect_loop()
                except AgentError as exc:
                    fatal = exc  # raised below, after the jobs ended (not in an exception group)
                finally:
                    ticking.cancel()
                    core.cancel_jobs()
        finally:
            self.runner.nursery = self.lifecycle.nursery = None
        if fatal is not None:
            raise fatal

    async def _open_images(self) -> None:
        """A container node's image cache, found on disk (``images/store.py``); its
        state goes with the hello and, when it changed, the heartbeats."""
        store = self.runner.images
        if store is None:
            return
        try:
            await trio.to_thread.run_sync(store.open)
        except OSError as exc:
            raise AgentError(
                f"cannot use the image cache {store.root}: {exc.strerror or exc}"
            ) from None
        self.core.image_facts = store.facts

    def _reported(self, facts: Facts) -> Facts:
        """The facts with the agent's flags and what it settled applied on top."""
        update: dict[str, object] = {}
        if self.name:
            update["name"] = self.name
        if self.max_concurrency:
            update["max_concurrency"] = self.max_concurrency
        if self.cpu_cores:
            update["cpu_cores"] = self.cpu_cores
        if self.advertise_address:
            update["advertise_address"] = self.advertise_address
        capabilities = reported_capabilities(
            facts.capabilities, self._capabilities, self.extra_capabilities
        )
        if capabilities != facts.capabilities:
            update["capabilities"] = capabilities
        if facts.executors != [self.options.executor]:
            update["executors"] = [self.options.executor]
        return facts.model_copy(update=update) if update else facts


async def _within(scope: trio.CancelScope, fn: Callable[[], Awaitable[None]]) -> None:
    """Run ``fn`` until ``scope`` is cancelled."""
    with scope:
        await fn()
