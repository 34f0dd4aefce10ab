"""Control groups for one job: its memory, CPU and pids limits, its out-of-memory kills,
and every process it started (killed at the end, even those that left its process group).

Two layouts, found by :func:`find_cgroups` at agent start:

* **cgroup v1** (one hierarchy per controller, e.g. ``/sys/fs/cgroup/memory``): a job gets
  ``<agent's own cgroup>/runplane-jobs/<job>`` in each of the ``memory``, ``cpu`` and
  ``pids`` hierarchies that is mounted and writable. Limits: ``memory.limit_in_bytes``
  (and ``memory.memsw.limit_in_bytes`` where swap is accounted, so swap cannot stretch
  it), ``cpu.cfs_quota_us``/``cpu.cfs_period_us``, ``pids.max``; OOM kills are counted in
  ``memory.oom_control`` (``oom_kill N``).
* **cgroup v2** (one unified hierarchy): a job gets ``<agent's cgroup>/runplane-jobs/<job>``
  with ``memory.max`` (and ``memory.swap.max`` 0), ``cpu.max`` and ``pids.max``; OOM kills
  are counted in ``memory.events``. v2 lets a cgroup with processes in it hand no
  controllers to its children, so the agent first moves itself into a leaf
  ``<agent's cgroup>/agent`` and then enables the controllers below (the layout systemd's
  ``Delegate=yes`` gives a service).

A job's first process joins its groups *before* it runs anything (the launcher writes its
own pid into each ``cgroup.procs``, then execs: see ``runplane/agent/launch.py``), so
nothing it forks can start outside them. Everything here is blocking file I/O on cgroupfs
(fast, in-kernel); callers on the trio loop use a worker thread where they may wait.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

log = logging.getLogger("runplane.agent")

#: The directory under the agent's own cgroup that holds one cgroup per running job.
JOBS_DIR = "runplane-jobs"
#: The controllers a job's limits use, by limit.
CONTROLLERS = ("memory", "cpu", "pids")
#: CFS period (µs) of a CPU quota: ``cpu_cores`` cores = ``cpu_cores * period`` per period.
CPU_PERIOD_US = 100_000
#: Killing what is left of a job's cgroup is retried this long before giving up.
EMPTY_TIMEOUT_SEC = 5.0

Version = Literal["v1", "v2"]
_NAME = re.compile(r"[A-Za-z0-9_.-]+")


@dataclass(frozen=True, slots=True)
class Cgroups:
    """Where this agent creates its jobs' cgroups: one parent directory per controller
    (v1) or one parent for all (v2: every controller maps to the same directory)."""

    version: Version
    #: controller -> the parent directory of the jobs' cgroups (only usable controllers)
    parents: dict[str, Path]

    @property
    def controllers(self) -> frozenset[str]:
        return frozenset(self.parents)

    def job(self, name: str) -> JobCgroup:
        """The (not yet created) cgroup of job ``name`` (``[A-Za-z0-9_.-]+``)."""
        if not _NAME.fullmatch(name) or name in (".", ".."):
            raise ValueError(f"bad cgroup name {name!r}")
        dirs = {c: p / name for c, p in self.parents.items()}
        return JobCgroup(self.version, dirs)


@dataclass(frozen=True, slots=True)
class JobCgroup:
    """One job's cgroup(s): created with its limits, joined by its first process,
    emptied and removed at its end."""

    version: Version
    dirs: dict[str, Path]

    def _unique(self) -> list[Path]:
        return list(dict.fromkeys(self.dirs.values()))

    @property
    def procs_files(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes its pid into to join."""
        return [str(d / "cgroup.procs") for d in self._unique()]

    def create(self, *, ram_bytes: int | None, cpu_cores: float | None, pids: int | None) -> None:
        """Create the directories and write the limits (None: not limited). Raises OSError."""
        for path in self._unique():
            if path.exists():  # a leftover of a crashed run of the same attempt
                self.remove()
            path.mkdir()
        if ram_bytes is not None and "memory" in self.dirs:
            self._memory(self.dirs["memory"], ram_bytes)
        if cpu_cores is not None and "cpu" in self.dirs:
            quota = max(1000, round(cpu_cores * CPU_PERIOD_US))
            cpu = self.dirs["cpu"]
            if self.version == "v1":
                _write(cpu / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                _write(cpu / "cpu.cfs_quota_us", str(quota))
            else:
                _write(cpu / "cpu.max", f"{quota} {CPU_PERIOD_US}")
        if pids is not None and "pids" in self.dirs:
            _write(self.dirs["pids"] / "pids.max", str(max(1, pids)))

    def _memory(self, path: Path, limit: int) -> None:
        if self.version == "v1":
            _write(path / "memory.limit_in_bytes", str(limit))
            swap = path / "memory.memsw.limit_in_bytes"
            if swap.exists():  # memory + swap: swap cannot stretch the limit
                _write(swap, str(limit))
            return
        _write(path / "memory.max", str(limit))
        swap = path / "memory.swap.max"
        if swap.exists():
            _write(swap, "0")

    def oom_kills(self) -> int:
        """Processes of the job the kernel killed for going over its memory limit."""
        path = self.dirs.get("memory")
        if path is None:
            return 0
        name = "memory.oom_control" if self.version == "v1" else "memory.events"
        try:
            text = (path / name).read_text()
        except OSError:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill" and value.strip().isdigit():
                return int(value)
        return 0

    def pids(self) -> set[int]:
        """Every process still in the job's cgroup(s)."""
        found: set[int] = set()
        for path in self._unique():
            try:
                text = (path / "cgroup.procs").read_text()
            except OSError:
                continue
            found.update(int(p) for p in text.split() if p.isdigit())
        return found

    def kill_all(self, timeout: float = EMPTY_TIMEOUT_SEC) -> int:
        """SIGKILL every process left in the cgroup(s) (including those that left the
        job's process group or session) until none is left; how many were killed."""
        killed: set[int] = set()
        deadline = time.monotonic() + timeout
        while True:
            left = self.pids()
            if not left:
                return len(killed)
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.add(pid)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                log.warning(
                    "processes of a job's cgroup did not die",
                    extra={"cgroup": str(self._unique()[0]), "pids": sorted(left)[:20]},
                )
                return len(killed)
            time.sleep(0.01)

    def remove(self) -> None:
        """Kill what is left and remove the directories (best effort, logged)."""
        self.kill_all()
        for path in self._unique():
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if exc.errno != errno.EBUSY:
                        log.warning(
                            "cannot remove a job cgroup",
                            extra={"cgroup": str(path), "error": exc.strerror},
                        )
                        break
                    time.sleep(0.02)  # exiting tasks leave the group a moment later


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


# --------------------------------------------------------------------------- discovery


def own_cgroups(text: str) -> tuple[dict[str, str], str | None]:
    """From ``/proc/self/cgroup``: controller -> path for v1 hierarchies, and the v2 path
    (the ``0::`` line) or None."""
    v1: dict[str, str] = {}
    v2: str | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            v2 = path
            continue
        for controller in controllers.split(","):
            v1[controller] = path
    return v1, v2


def cgroup_mounts(mountinfo: str) -> tuple[dict[str, Path], Path | None]:
    """From ``/proc/self/mountinfo``: controller -> mount point of its v1 hierarchy, and
    the mount point of the v2 hierarchy (or None). A hierarchy mounted at a subtree of
    its root (a container's view) is skipped: paths from /proc/self/cgroup would not
    match it."""
    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, rest = left.split(), right.split()
        if len(fields) < 5 or len(rest) < 3:
            continue
        root, mount_point, fstype, options = fields[3], fields[4], rest[0], rest[2]
        if fstype == "cgroup2" and v2 is None:
            v2 = Path(mount_point)
        elif fstype == "cgroup" and root == "/":
            for option in options.split(","):
                if option in CONTROLLERS and option not in v1:
                    v1[option] = Path(mount_point)
    return v1, v2


def find_cgroups(
    proc_self_cgroup: str | None = None, mountinfo: str | None = None
) -> Cgroups | None:
    """Where this agent can create job cgroups with at least one of the controllers its
    limits use; None when it cannot (not Linux, no cgroupfs, not writable: an agent not
    running as root without a delegated cgroup). Creates the ``runplane-jobs`` parents;
    on v2 may move this process into a leaf (see the module doc). Blocking."""
    try:
        own_text = proc_self_cgroup or Path("/proc/self/cgroup").read_text()
        mounts_text = mountinfo or Path("/proc/self/mountinfo").read_text()
    except OSError:
        return None
    own_v1, own_v2 = own_cgroups(own_text)
    mounts_v1, mount_v2 = cgroup_mounts(mounts_text)
    parents: dict[str, Path] = {}
    for controller in CONTROLLERS:
        if controller in mounts_v1 and controller in own_v1:
            base = mounts_v1[controller] / own_v1[controller].lstrip("/")
            parent = _jobs_parent(base)
            if parent is not None:
                parents[controller] = parent
    if parents:
        return Cgroups("v1", parents)
    if mount_v2 is not None and own_v2 is not None:
        return _find_v2(mount_v2 / own_v2.lstrip("/"))
    return None


def _jobs_parent(base: Path) -> Path | None:
    parent = base / JOBS_DIR
    try:
        parent.mkdir(exist_ok=True)
        probe = parent / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError:
        return None
    sweep_stale(parent)
    return parent


def sweep_stale(parent: Path) -> int:
    """Remove the job cgroups an agent that is gone left behind (it crashed or was
    SIGKILLed: its jobs were requeued by the server): every ``<job>.<pid>`` whose agent
    pid is not running, what is still in it killed first. How many were removed."""
    removed = 0
    try:
        entries = list(parent.iterdir())
    except OSError:
        return 0
    for entry in entries:
        pid = entry.name.rpartition(".")[2]
        if not entry.is_dir() or not pid.isdigit() or _alive(int(pid)):
            continue
        JobCgroup("v1", {"any": entry}).remove()
        removed += not entry.exists()
    if removed:
        log.info(
            "removed job cgroups of a gone agent", extra={"parent": str(parent), "count": removed}
        )
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _find_v2(base: Path) -> Cgroups | None:
    try:
        available = set((base / "cgroup.controllers").read_text().split())
    except OSError:
        return None
    wanted = [c for c in CONTROLLERS if c in available]
    if not wanted:
        return None
    try:
        enabled = set((base / "cgroup.subtree_control").read_text().split())
        if not set(wanted) <= enabled:
            # No internal processes: move this process (all its threads) into a leaf first.
            leaf = base / "agent"
            leaf.mkdir(exist_ok=True)
            _write(leaf / "cgroup.procs", str(os.getpid()))
            _write(base / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        jobs = base / JOBS_DIR
        jobs.mkdir(exist_ok=True)
        sweep_stale(jobs)
        _write(jobs / "cgroup.subtree_control", " ".join(f"+{c}" for c in wanted))
        probe = jobs / f"probe-{os.getpid()}"
        probe.mkdir(exist_ok=True)
        probe.rmdir()
    except OSError as exc:
        log.info("cgroup v2 not usable for job limits", extra={"error": exc.strerror})
        return None
    return Cgroups("v2", {c: jobs for c in wanted})
