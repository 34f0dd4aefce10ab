"""Supervisors after OTP: child specs, one-for-one restarts, intensity, escalation."""

from __future__ import annotations

import enum
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, overload

import trio

from . import clock
from .actor import Actor, ActorRef, run_actor
from .errors import ActorError, SupervisorEscalated
from .mailbox import Mailbox
from .throttle import OnceEvery

logger = logging.getLogger("runplane.runtime")

#: A child that crashes less than its supervisor's period after it (re)started, more than
#: :data:`RESTART_AT_ONCE` times in a row, is restarted after a delay that doubles from
#: :data:`RESTART_BACKOFF_BASE` up to :data:`RESTART_BACKOFF_MAX`: a child failing on
#: something outside it (the store unreachable) retries a few times a second at first,
#: then every few seconds, instead of spinning. A run longer than the period resets it.
#: Only the restarts made at once count toward the supervisor's intensity.
RESTART_AT_ONCE = 3
RESTART_BACKOFF_BASE = 0.1
RESTART_BACKOFF_MAX = 5.0
#: While a child keeps crashing, "child restarted" is logged at most once per this many
#: seconds (with the number of restarts since the last line), not once per restart.
RESTART_LOG_INTERVAL = 10.0


def restart_delay(quick_crashes: int) -> float:
    """Seconds to wait before restarting a child after its ``quick_crashes``-th crash in a
    row that came less than a period after its start (0: restart at once)."""
    if quick_crashes <= RESTART_AT_ONCE:
        return 0.0
    doublings = quick_crashes - RESTART_AT_ONCE - 1
    return min(RESTART_BACKOFF_BASE * float(2**doublings), RESTART_BACKOFF_MAX)


M = TypeVar("M")
ChildT = TypeVar("ChildT", bound="Actor[Any] | Supervisor", covariant=True)


class Restart(enum.Enum):
    """When a child that ended is started again (OTP restart types)."""

    PERMANENT = "permanent"  # always
    TRANSIENT = "transient"  # only after a crash (an exception)
    TEMPORARY = "temporary"  # never


@dataclass(frozen=True, slots=True)
class ChildSpec(Generic[ChildT]):
    """How to build, restart and stop one child.

    ``factory`` builds a fresh child (an :class:`Actor` or a nested
    :class:`Supervisor`), sync or async; it runs again for every restart, so it
    is where state is rebuilt (loaded from the store). ``on_exit`` is called
    once when a started child ends for good, with its last error or ``None``.
    """

    id: Hashable
    factory: Callable[[], ChildT | Awaitable[ChildT]]
    restart: Restart = Restart.PERMANENT
    shutdown_timeout: float = 5.0
    mailbox_capacity: int = 64
    idle_timeout: float | None = None
    on_exit: Callable[[BaseException | None], None] | None = None

    @property
    def name(self) -> str:
        if isinstance(self.id, tuple):
            return "/".join(map(str, self.id))
        return str(self.id)


@dataclass(frozen=True, slots=True)
class SupervisorStatistics:
    children: int
    restarts: int  # since this run started
    recent_restarts: int  # within the current intensity period
    intensity: int
    period: float
    running: bool


class _OnStarted:
    """A ``task_status`` that calls back (to start a nested supervisor)."""

    def __init__(self, callback: Callable[[], None]) -> None:
        self._callback = callback

    def started(self, value: object = None) -> None:
        self._callback()


class _Child:
    """A supervised slot: it keeps the mailbox (and so the ref) across restarts."""

    def __init__(self, spec: ChildSpec[Any], static: bool) -> None:
        self.spec = spec
        self.static = static
        self.mailbox: Mailbox | None = None
        self.instance: Actor[Any] | Supervisor | None = None
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.stopping = False
        #: restart backoff (:func:`restart_delay`): when the current run began, crashes in
        #: a row each within a period of its start, the wait before the next restart
        self.began = 0.0
        self.quick_crashes = 0
        self.backoff = trio.CancelScope()
        #: "child restarted" lines: at most one per RESTART_LOG_INTERVAL while it crashes
        self.restart_log = OnceEvery(RESTART_LOG_INTERVAL, clock.now)

    @property
    def handle(self) -> ActorRef[Any] | Supervisor:
        if self.mailbox is not None:
            return ActorRef(self.mailbox)
        assert isinstance(self.instance, Supervisor)
        return self.instance


class Supervisor:
    """Runs children and restarts them one-for-one, within a restart intensity.

    More than ``intensity`` restarts within ``period`` seconds (measured with
    :func:`clock.now`) make it stop all children and raise
    :class:`SupervisorEscalated` from :meth:`run`, which a parent supervisor
    treats as a crash of that child. :meth:`run` can be called again after it
    returned, so a factory may hand back the same supervisor on a restart.
    """

    def __init__(
        self,
        children: tuple[ChildSpec[Any], ...] | list[ChildSpec[Any]] = (),
        *,
        intensity: int = 3,
        period: float = 5.0,
        name: str = "supervisor",
    ) -> None:
        if intensity < 0 or period <= 0:
            raise ValueError("intensity must be >= 0 and period > 0")
        self.name = name
        self.intensity = intensity
        self.period = period
        self._static = list(children)
        self._children: dict[Hashable, _Child] = {}
        self._restart_times: deque[float] = deque()
        self._restarts = 0
        self._escalation: SupervisorEscalated | None = None
        self._nursery: trio.Nursery | None = None
        self._running = False
        self._closing = False
        self._stop_requested = trio.Event()
        self._done = trio.Event()

    # -- running -------------------------------------------------------------

    async def run(
        self, *, task_status: trio.TaskStatus[Supervisor] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Start the static children in order, then supervise until stopped.

        ``task_status.started(self)`` once the static children are up. Returns
        after :meth:`stop`; raises :class:`SupervisorEscalated` after giving
        up, or the error of a static child that failed to start.
        """
        if self._running:
            raise RuntimeError(f"supervisor {self.name!r} is already running")
        self._running = True
        self._closing = False
        self._restart_times.clear()
        self._restarts = 0
        self._escalation = None
        failure: Exception | None = None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    for spec in self._static:
                        await self._start(spec, static=True)
                except Exception as exc:
                    failure = exc
                else:
                    task_status.started(self)
                    await self._stop_requested.wait()
                await self._shutdown()
        finally:
            self._running = False
            self._closing = True
            self._nursery = None
            done, self._done = self._done, trio.Event()
            self._stop_requested = trio.Event()  # ready for another run
            done.set()
        if failure is not None:
            raise failure
        if self._escalation is not None:
            raise self._escalation

    def request_stop(self) -> None:
        """Ask :meth:`run` to shut the children down in order and return."""
        self._stop_requested.set()

    async def stop(self) -> None:
        """Shut down in order and wait for :meth:`run` to return."""
        if not self._running:
            return
        done = self._done
        self.request_stop()
        await done.wait()

    @property
    def running(self) -> bool:
        return self._running

    # -- children ------------------------------------------------------------

    @overload
    async def start_child(self, spec: ChildSpec[Supervisor]) -> Supervisor: ...
    @overload
    async def start_child(self, spec: ChildSpec[Actor[M]]) -> ActorRef[M]: ...
    async def start_child(self, spec: ChildSpec[Any]) -> ActorRef[Any] | Supervisor:
        """Start a child and wait until it is up (its ``on_start`` done).

        Returns its :class:`ActorRef` (or the nested :class:`Supervisor`). If
        it fails to start, the error is raised here and it is not restarted.
        """
        if not self._running or self._closing:
            raise ActorError(f"supervisor {self.name!r} is not running")
        return await self._start(spec, static=False)

    async def stop_child(self, child_id: Hashable) -> None:
        """Stop a child in order (see :meth:`_stop`); it is not restarted."""
        child = self._children.get(child_id)
        if child is None:
            raise KeyError(child_id)
        await self._stop(child)

    def child(self, child_id: Hashable) -> ActorRef[Any] | Supervisor:
        """The handle of a running child; ``KeyError`` if there is none."""
        return self._children[child_id].handle

    def children(self) -> list[Hashable]:
        """Ids of the running children, in start order."""
        return list(self._children)

    def statistics(self) -> SupervisorStatistics:
        self._forget_old_restarts()
        return SupervisorStatistics(
            children=len(self._children),
            restarts=self._restarts,
            recent_restarts=len(self._restart_times),
            intensity=self.intensity,
            period=self.period,
            running=self._running,
        )

    # -- internals -----------------------------------------------------------

    async def _start(self, spec: ChildSpec[Any], *, static: bool) -> ActorRef[Any] | Supervisor:
        if spec.id in self._children:
            raise ValueError(f"supervisor {self.name!r} already has a child {spec.id!r}")
        assert self._nursery is not None
        child = _Child(spec, static)
        self._children[spec.id] = child
        failure = await self._nursery.start(self._run_child, child)
        if failure is not None:
            raise failure
        return child.handle

    async def _stop(self, child: _Child) -> None:
        """Orderly stop: close the mailbox (the actor drains it and runs
        ``on_stop``) or ask a nested supervisor to stop; cancel it after
        ``shutdown_timeout`` seconds."""
        child.stopping = True
        child.backoff.cancel()  # a restart waiting out its backoff: not any more
        if child.mailbox is not None:
            child.mailbox.close()
        if isinstance(child.instance, Supervisor):
            child.instance.request_stop()
        with trio.move_on_after(child.spec.shutdown_timeout):
            await child.done.wait()
        if not child.done.is_set():
            logger.warning(
                "child did not stop within its shutdown timeout; cancelling it",
                extra=self._log_extra(child, "kill"),
            )
            child.scope.cancel()
            await child.done.wait()

    async def _shutdown(self) -> None:
        """Dynamic children all at once, then static ones in reverse start order."""
        self._closing = True
        children = list(self._children.values())
        async with trio.open_nursery() as nursery:
            for child in children:
                if not child.static:
                    nursery.start_soon(self._stop, child)
        for child in reversed(children):
            if child.static:
                await self._stop(child)

    async def _run_child(
        self, child: _Child, *, task_status: trio.TaskStatus[Exception | None]
    ) -> None:
        spec = child.spec
        started = False
        error: Exception | None = None

        def on_started() -> None:
            nonlocal started
            if not started:
                started = True
                task_status.started(None)

        try:
            with child.scope:
                while True:
                    error = None
                    try:
                        await self._run_once(child, on_started)
                    except Exception as exc:
                        error = exc
                    if not started:
                        task_status.started(
                            error or ActorError(f"child {spec.name!r} ended before it started")
                        )
                        return
                    if child.stopping or self._closing or not _restarts(spec.restart, error):
                        if error is not None:
                            logger.warning(
                                "child crashed; not restarted",
                                exc_info=error,
                                extra=self._log_extra(child, "exit", error),
                            )
                        return
                    delay = self._restart_delay(child, error)
                    if not self._allow_restart(counted=delay == 0):
                        self._escalate(child, error)
                        return
                    if not await self._back_off(child, error, delay):
                        return
        finally:
            if child.mailbox is not None:
                child.mailbox.terminate(cause=error)
            if self._children.get(spec.id) is child:
                del self._children[spec.id]
            if started and spec.on_exit is not None:
                try:
                    spec.on_exit(error)
                except Exception:
                    logger.exception("on_exit failed", extra=self._log_extra(child, "exit"))
            child.done.set()

    def _restart_delay(self, child: _Child, error: Exception | None) -> float:
        """The backoff before restarting ``child`` (:func:`restart_delay`), counting its
        crashes in a row that each came within a period of its start."""
        quick = error is not None and clock.now() - child.began < self.period
        child.quick_crashes = child.quick_crashes + 1 if quick else 0
        return restart_delay(child.quick_crashes)

    async def _back_off(self, child: _Child, error: Exception | None, delay: float) -> bool:
        """Log the restart (at most once per RESTART_LOG_INTERVAL while the child keeps
        crashing) and wait out its backoff ``delay``; False if it was stopped meanwhile."""
        if child.restart_log(force=delay == 0):
            extra = self._log_extra(child, "restart", error)
            since = child.restart_log.take_suppressed() + 1
            extra.update(restarts_since_last_line=since, backoff_sec=delay)
            logger.warning("child restarted", exc_info=error, extra=extra)
        if delay > 0:
            child.backoff = trio.CancelScope(deadline=trio.current_time() + delay)
            with child.backoff:
                await trio.sleep_forever()
        return not (child.stopping or self._closing)

    async def _run_once(self, child: _Child, on_started: Callable[[], None]) -> None:
        spec = child.spec
        child.began = clock.now()
        made = spec.factory()
        instance = await made if inspect.isawaitable(made) else made
        child.instance = instance
        if isinstance(instance, Supervisor):
            if not child.stopping:
                await instance.run(task_status=_OnStarted(on_started))
        elif isinstance(instance, Actor):
            if child.mailbox is None:
                child.mailbox = Mailbox(spec.name, spec.mailbox_capacity)
            if child.stopping:
                child.mailbox.close()  # stopped while it was being built
            else:
                child.mailbox.reopen()  # after an orderly end (a permanent child restarted)
            await run_actor(
                instance, child.mailbox, started=on_started, idle_timeout=spec.idle_timeout
            )
        else:
            raise TypeError(f"factory of {spec.name!r} built {instance!r}, not an Actor/Supervisor")

    def _forget_old_restarts(self) -> None:
        horizon = clock.now() - self.period
        while self._restart_times and self._restart_times[0] <= horizon:
            self._restart_times.popleft()

    def _allow_restart(self, *, counted: bool = True) -> bool:
        """Whether one more restart keeps within the intensity. A restart after a backoff
        delay is not ``counted`` there: a child failing through an outage backs off for
        as long as it lasts instead of escalating (and taking the tree down)."""
        self._forget_old_restarts()
        if counted:
            if len(self._restart_times) >= self.intensity:
                return False
            self._restart_times.append(clock.now())
        self._restarts += 1
        return True

    def _escalate(self, child: _Child, error: Exception | None) -> None:
        escalation = SupervisorEscalated(
            self.name, child.spec.id, len(self._restart_times), self.period
        )
        escalation.__cause__ = error
        logger.error(
            "restart intensity exceeded; stopping all children and escalating",
            exc_info=error,
            extra=self._log_extra(child, "escalate", error),
        )
        if self._escalation is None:
            self._escalation = escalation
        self._closing = True
        self.request_stop()

    def _log_extra(
        self, child: _Child, event: str, error: BaseException | None = None
    ) -> dict[str, Any]:
        return {
            "event": event,
            "supervisor": self.name,
            "child_id": child.spec.name,
            "restart": child.spec.restart.value,
            "recent_restarts": len(self._restart_times),
            "intensity": self.intensity,
            "period": self.period,
            "error": None if error is None else repr(error),
        }


def _restarts(restart: Restart, error: BaseException | None) -> bool:
    return restart is Restart.PERMANENT or (restart is Restart.TRANSIENT and error is not None)
