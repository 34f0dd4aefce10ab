"""How one job runs on this node: its limits checked against what the node enforces, its
GPUs assigned, and the :class:`~runplane.agent.launch.Launch` that applies the rest.

The agent asks :meth:`NodeRules.plan` once per attempt, before the job's mounts are
prepared; the answer either refuses the job (a limit the node cannot enforce and the
operator did not allow best effort: placement should not have sent it, so this is the
backstop), hands it back (no free GPU), or says how to run it.
"""

from __future__ import annotations

import os
from collections.abc import Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from runplane.agent.gpus import Device, GpuPool, visible_env
from runplane.agent.isolation import JobUser, isolation_refusal
from runplane.agent.launch import Launch, Runsc
from runplane.agent.limits import (
    BEST_EFFORT_CAPABILITY,
    SANDBOX_CAPABILITY,
    Enforcement,
    JobLimits,
)
from runplane.agent.protocol import RunLimits

Executor = Literal["process", "sandbox", "container"]
EXECUTORS: tuple[Executor, ...] = ("process", "sandbox", "container")
#: The container executor's capability (jobs with an image run only there), and gVisor's
#: (reported only when a probe run of runsc succeeded at start).
CONTAINER_CAPABILITY = "executor-container"
GVISOR_CAPABILITY = "isolation-gvisor"


@dataclass(slots=True)
class JobPlan:
    """What :meth:`NodeRules.plan` decided for one attempt."""

    launch: Launch | None = None
    env: dict[str, str] = field(default_factory=dict)
    gpus: tuple[Device, ...] = ()
    #: system lines for the job's log (limits not enforced under best effort)
    notes: list[str] = field(default_factory=list)
    #: the job cannot run here: fail it with this error
    refusal: str | None = None
    #: the job cannot run here *now* (no free GPU): hand it back to be placed again
    hand_back: str | None = None


@dataclass(slots=True)
class NodeRules:
    """What this agent enforces and how it starts jobs (settled at agent start)."""

    node: str
    executor: Executor = "process"
    enforcement: Enforcement = field(default_factory=Enforcement)
    best_effort: bool = False
    user: JobUser | None = None
    #: what the sandbox hides: the agent's data dir and work roots
    hidden: tuple[Path, ...] = ()
    gpus: GpuPool = field(default_factory=lambda: GpuPool(()))
    setpriv: str = "setpriv"
    #: the container executor's: the host's NVIDIA driver files (bound into GPU jobs'
    #: images) and gVisor when its probe passed
    driver_files: tuple[Path, ...] = ()
    runsc: Runsc | None = None

    def capabilities(self) -> list[str]:
        """The capabilities this agent reports for its limits and executor."""
        caps = self.enforcement.capabilities()
        if self.best_effort:
            caps.append(BEST_EFFORT_CAPABILITY)
        if self.executor == "sandbox":
            caps.append(SANDBOX_CAPABILITY)
        if self.executor == "container":
            caps.append(CONTAINER_CAPABILITY)
            if self.runsc is not None:
                caps.append(GVISOR_CAPABILITY)
        return caps

    def isolation_refusal(self, isolation: str | None) -> str | None:
        """Why this node cannot give a job ``isolation``; None when it can."""
        given = {"gvisor"} if self.executor == "container" and self.runsc is not None else set()
        return isolation_refusal(isolation, self.node, self.executor, frozenset(given))

    def plan(
        self, holder: Hashable, order: RunLimits | None, read_only: tuple[Path, ...] = ()
    ) -> JobPlan:
        """How the attempt ``holder`` runs (its GPUs, if any, are held until
        :meth:`release`)."""
        limits = JobLimits.of(order.model_dump() if order is not None else None)
        plan = JobPlan()
        unenforced = self.enforcement.unenforced(limits)
        if unenforced:
            named = ", ".join(f"limits.{name}" for name in unenforced)
            if not self.best_effort:
                plan.refusal = (
                    f"node {self.node} cannot enforce {named}; run it on a node that reports "
                    "the limit's capability, or start this agent with --best-effort-limits "
                    "to run such jobs without it"
                )
                return plan
            plan.notes.append(
                f"not enforced on node {self.node} (best effort): {named}; "
                + "; ".join(self.enforcement.notes)
            )
        wanted = order.gpus if order is not None else 0
        devices: tuple[Device, ...] = ()
        if wanted:
            taken = self.gpus.take(holder, wanted)
            if taken is None:
                free = len(self.gpus.free())
                plan.hand_back = (
                    f"node {self.node} has {free} free GPU{'' if free == 1 else 's'} of "
                    f"{self.gpus.total}, the job needs {wanted}: handed back to be placed again"
                )
                return plan
            devices = taken
        plan.gpus = devices
        plan.env = visible_env(devices, self.gpus.total > 0)
        cgroups = self.enforcement.cgroups
        enforces = self.enforcement.enforces
        # Every job of a node with cgroups gets its own (limits or not): its processes are
        # then all found, and killed, at its end.
        cgroup = cgroups.job(_cgroup_name(holder)) if cgroups is not None else None
        no_internet = limits.no_internet and self.enforcement.enforces("no_internet")
        launch = Launch(
            cgroup=cgroup,
            bwrap=self.enforcement.bwrap,
            sandbox=self.executor == "sandbox",
            no_internet=no_internet,
            user=self.user,
            hidden=self.hidden,
            gpu_indices=tuple(d.index for d in devices),
            read_only=read_only if self.executor != "process" else (),
            setpriv=self.setpriv,
            driver_files=self.driver_files if devices else (),
            runsc=self.runsc,
            ram_gb=limits.ram_gb if enforces("ram_gb") else None,
            cpu_cores=limits.cpu_cores if enforces("cpu_cores") else None,
            pids=limits.pids if enforces("pids") else None,
        )
        plan.launch = launch
        return plan

    def release(self, holder: Hashable) -> None:
        self.gpus.give_back(holder)


def _cgroup_name(holder: Hashable) -> str:
    text = "-".join(str(part) for part in holder) if isinstance(holder, tuple) else str(holder)
    safe = "".join(c if c.isalnum() or c in "_.-" else "_" for c in text)
    return f"{safe}.{os.getpid()}"
