"""What this node can enforce of a job's ``limits``, found once at agent start, and the
capability names it reports for it (placement sends a job only where its limits hold).

=============== ============================================== =====================
limit           enforced by                                    capability
=============== ============================================== =====================
``ram_gb``      the job's memory cgroup (``cgroups.py``)       ``limit-ram``
``cpu_cores``   a CFS CPU quota on the job's cpu cgroup        ``limit-cpu``
``pids``        the job's pids cgroup                          ``limit-pids``
``no_internet`` its own network namespace, loopback only       ``limit-no-internet``
``egress_allow`` not enforced by any executor yet              ``limit-egress`` (never)
``gpu_count``   devices assigned from the free set (gpus.py)   (every agent)
``timeout_sec`` the executor's watchdog                        (every agent)
=============== ============================================== =====================

An agent started with ``--best-effort-limits`` also reports ``limits-best-effort``: it
takes jobs whose limits it cannot enforce, and each such job's system log says which
limit is not enforced. The sandbox executor reports ``executor-sandbox``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runplane.agent.cgroups import Cgroups, find_cgroups

#: limit -> the capability of a node that enforces it (the server's placement reads the
#: same names: ``runplane/placement/model.py`` LIMIT_CAPABILITIES).
LIMIT_CAPABILITIES: Mapping[str, str] = {
    "ram_gb": "limit-ram",
    "cpu_cores": "limit-cpu",
    "pids": "limit-pids",
    "no_internet": "limit-no-internet",
    "egress_allow": "limit-egress",
}
BEST_EFFORT_CAPABILITY = "limits-best-effort"
SANDBOX_CAPABILITY = "executor-sandbox"
#: controller of the cgroup that enforces each cgroup limit
_CONTROLLER = {"ram_gb": "memory", "cpu_cores": "cpu", "pids": "pids"}
_PROBE_TIMEOUT_SEC = 10.0


@dataclass(frozen=True, slots=True)
class JobLimits:
    """The limits of one job the agent enforces (None / False / empty: not asked)."""

    ram_gb: float | None = None
    cpu_cores: float | None = None
    pids: int | None = None
    no_internet: bool = False
    egress_allow: tuple[str, ...] = ()

    def asked(self) -> list[str]:
        """The limits this job asks for, in the table's order."""
        out = []
        if self.ram_gb:
            out.append("ram_gb")
        if self.cpu_cores:
            out.append("cpu_cores")
        if self.pids:
            out.append("pids")
        if self.no_internet:
            out.append("no_internet")
        if self.egress_allow:
            out.append("egress_allow")
        return out

    @classmethod
    def of(cls, order: Mapping[str, Any] | None) -> JobLimits:
        """From a run order's ``limits`` (zero values mean "not given")."""
        if not order:
            return cls()
        return cls(
            ram_gb=order.get("ram_gb") or None,
            cpu_cores=order.get("cpu_cores") or None,
            pids=order.get("pids") or None,
            no_internet=bool(order.get("no_internet")),
            egress_allow=tuple(order.get("egress_allow") or ()),
        )


@dataclass(frozen=True, slots=True)
class Enforcement:
    """What this node can enforce: found once by :func:`probe`."""

    cgroups: Cgroups | None = None
    #: bubblewrap, when it runs here (namespaces: no_internet, the sandbox executor)
    bwrap: str | None = None
    #: why something cannot be enforced (for the start log and the docs' table)
    notes: tuple[str, ...] = ()

    def enforces(self, limit: str) -> bool:
        if limit in _CONTROLLER:
            return self.cgroups is not None and _CONTROLLER[limit] in self.cgroups.controllers
        if limit == "no_internet":
            return self.bwrap is not None
        return False  # egress_allow: no executor enforces it yet

    def capabilities(self) -> list[str]:
        return [cap for limit, cap in LIMIT_CAPABILITIES.items() if self.enforces(limit)]

    def unenforced(self, limits: JobLimits) -> list[str]:
        """The limits ``limits`` asks for that this node cannot enforce."""
        return [name for name in limits.asked() if not self.enforces(name)]


def probe(*, want_cgroups: bool = True) -> Enforcement:
    """Find what this node can enforce (blocking: creates the jobs' cgroup parents and
    runs bubblewrap once)."""
    notes: list[str] = []
    cgroups = find_cgroups() if want_cgroups else None
    if cgroups is None:
        notes.append(
            "no writable memory/cpu/pids cgroup (run the agent as root, or in a cgroup "
            "delegated to its user): ram_gb, cpu_cores and pids are not enforced"
        )
    else:
        missing = [c for c in ("memory", "cpu", "pids") if c not in cgroups.controllers]
        if missing:
            notes.append(f"cgroup {cgroups.version} without {', '.join(missing)}")
    bwrap, why = bwrap_probe()
    if bwrap is None:
        notes.append(
            f"{why}: no_internet and the sandbox executor are not available (apt-get "
            "install bubblewrap; user namespaces must be allowed)"
        )
    return Enforcement(cgroups, bwrap, tuple(notes))


def bwrap_works() -> str | None:
    """The path of a ``bwrap`` that can create user-visible namespaces here (pid, net,
    mount): tried once with ``true``; None when missing or refused."""
    return bwrap_probe()[0]


def bwrap_probe() -> tuple[str | None, str]:
    """``(path, "")`` for a working ``bwrap``, else ``(None, why)``: said once, in the
    agent's "job limits" line, not in a line of its own at every start."""
    path = shutil.which("bwrap")
    if path is None:
        return None, "bubblewrap (bwrap) is not installed"
    argv = [path, "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--proc", "/proc"]
    argv += ["--dev", "/dev", "--", "true"]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_SEC,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"bubblewrap does not run: {exc}"
    if done.returncode != 0:
        error = done.stderr.decode(errors="replace").strip()[:200]
        return None, f"bubblewrap cannot create namespaces here: {error}"
    return path, ""
