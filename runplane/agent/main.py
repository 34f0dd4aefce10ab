"""``runplane agent``: the node agent as its own process.

Beyond :class:`~runplane.agent.client.Agent` itself, the process

* turns SIGINT/SIGTERM into a drain (:meth:`~runplane.agent.client.Agent.drain`: no new
  work, running jobs get ``--drain-timeout`` seconds to finish, the rest are stopped and
  handed back to the server, which requeues them); a second signal hands them back at
  once, a third stops at once (jobs SIGKILLed, nothing more reported);
* makes itself a *child subreaper* (Linux ``prctl(PR_SET_CHILD_SUBREAPER)``): processes
  orphaned inside a job's tree are re-parented to the agent instead of PID 1, and
  :func:`reap_orphans` reaps them when they exit, so killed job trees do not linger as
  zombies (many containers run a PID 1 that never reaps);
* re-executes itself after a self-update installed a new version
  (:attr:`~runplane.agent.client.Agent.restart_into`, :mod:`runplane.agent.update`): the
  same arguments, through the newly installed package.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import math
import os
import signal
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path

import trio

from runplane import fdlimit
from runplane.agent.client import DRAIN_TIMEOUT_SEC, Agent
from runplane.agent.errors import AgentError
from runplane.agent.images.store import DEFAULT_CACHE_GB
from runplane.agent.update import reexec_argv

log = logging.getLogger("runplane.agent")

PR_SET_CHILD_SUBREAPER = 36
#: Zombies are looked for this often, and shortly after each SIGCHLD.
REAP_INTERVAL_SEC = 5.0
REAP_AFTER_SIGCHLD_SEC = 0.5
REAP_RESCAN_SEC = 1.0


def become_subreaper() -> bool:
    """Make this process the reaper of its descendants' orphans (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            log.warning(
                "cannot become a child subreaper",
                extra={"error": os.strerror(ctypes.get_errno())},
            )
            return False
    except (OSError, AttributeError) as exc:
        log.warning("cannot become a child subreaper", extra={"error": str(exc)})
        return False
    return True


def zombie_children(parent: int | None = None) -> set[int]:
    """Pids of zombie processes whose parent is ``parent`` (default: this process)."""
    ppid = os.getpid() if parent is None else parent
    found: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # "pid (comm) state ppid ..."
        if len(fields) > 1 and fields[0] == b"Z" and int(fields[1]) == ppid:
            found.add(int(name))
    return found


def reap(pids: Collection[int]) -> int:
    """``waitpid`` each pid (no-hang); the number actually reaped."""
    reaped = 0
    for pid in pids:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            continue
        reaped += done == pid
    return reaped


async def reap_orphans(
    protected: Callable[[], Collection[int]],
    *,
    interval: float = REAP_INTERVAL_SEC,
) -> None:
    """Reap zombie children that nobody else waits for, forever.

    Only a zombie seen in two consecutive scans is reaped (whoever started a process, such
    as trio or :mod:`subprocess`, waits for it at once, so it never stays a zombie that
    long), and never a pid in ``protected()`` (the job processes the executor waits for).
    ``waitpid(-1)`` would steal the exit status of the executor's own processes.
    """
    seen: set[int] = set()
    with trio.open_signal_receiver(signal.SIGCHLD) as sigchld:
        while True:
            zombies = await trio.to_thread.run_sync(zombie_children)
            candidates = (zombies & seen) - set(protected())
            if candidates:
                count = reap(candidates)
                if count:
                    log.info("reaped orphaned processes", extra={"count": count})
            seen = zombies - candidates
            # A zombie needs a second sighting: look again soon while there are any.
            with trio.move_on_after(REAP_RESCAN_SEC if seen else interval):
                await anext(sigchld)
                # Let a burst of exits settle, and give their parents time to wait for them.
                await trio.sleep(REAP_AFTER_SIGCHLD_SEC)


async def run_agent(agent: Agent, *, subreaper: bool = True) -> None:
    """Run ``agent`` until it stops, SIGINT/SIGTERM draining it (see the module doc)."""
    reaping = subreaper and become_subreaper()
    error: AgentError | None = None
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:

            async def watch_signals() -> None:
                count = 0
                async for signum in signals:
                    count += 1
                    name = signal.Signals(signum).name
                    if count == 1:
                        log.info(
                            "stop requested",
                            extra={
                                "signal": name,
                                "drain_timeout_sec": agent.lifecycle.drain_timeout,
                            },
                        )
                        agent.lifecycle.restart_into = None  # a stop wins over a self-update
                        agent.drain()
                    elif count == 2:
                        log.warning(
                            "second signal: handing back the running jobs now",
                            extra={"signal": name},
                        )
                        agent.drain()
                    else:
                        log.warning("third signal: stopping now", extra={"signal": name})
                        agent.stop_now()

            nursery.start_soon(watch_signals)
            if reaping:
                nursery.start_soon(reap_orphans, agent.job_pids)
            try:
                await agent.run()
            except AgentError as exc:
                error = exc  # raised below, outside the nursery (not in an exception group)
            finally:
                nursery.cancel_scope.cancel()
    if error is not None:
        raise error


def main(
    server: str,
    *,
    data_dir: Path,
    join_token: str | None = None,
    name: str | None = None,
    max_concurrency: int | None = None,
    capabilities: Sequence[str] = (),
    drain_timeout: float = DRAIN_TIMEOUT_SEC,
    host_paths: Sequence[Path] = (),
    run_as: str | None = None,
    uid_range: str | None = None,
    shared_uid_ok: bool = False,
    work_dir: Path | None = None,
    executor: str = "process",
    best_effort_limits: bool = False,
    auto_update: bool = False,
    update_drain_timeout: float | None = None,
    image_cache_gb: float = DEFAULT_CACHE_GB,
    advertise_address: str | None = None,
) -> int:
    """Entry of ``runplane agent``: exit 0 after a requested stop, 1 if refused, 2 bad input.
    The options (docs/agent.md) are those of :class:`~runplane.agent.client.Agent`."""
    try:
        agent = Agent(
            server,
            data_dir,
            join_token=join_token,
            name=name,
            max_concurrency=max_concurrency,
            extra_capabilities=capabilities,
            drain_timeout=drain_timeout,
            host_paths=host_paths,
            run_as=run_as,
            uid_range=uid_range,
            shared_uid_ok=shared_uid_ok,
            work_dir=work_dir,
            executor=executor,
            best_effort_limits=best_effort_limits,
            auto_update=auto_update,
            update_drain_timeout=math.inf if update_drain_timeout is None else update_drain_timeout,
            image_cache_gb=image_cache_gb,
            advertise_address=advertise_address,
        )
    except ValueError as exc:
        print(f"runplane agent: {exc}", file=sys.stderr)
        return 2
    fdlimit.raise_open_file_limit(log)  # soft to hard (logged)
    try:
        trio.run(run_agent, agent)
    except AgentError as exc:
        print(f"runplane agent: {exc}", file=sys.stderr)
        return 1
    if agent.restart_into is not None:
        argv = reexec_argv()
        log.info("restarting into the updated agent", extra={"version": agent.restart_into})
        logging.shutdown()  # flush: nothing of this process runs after exec
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(argv[0], argv)
    return 0
