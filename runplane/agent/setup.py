"""What an agent settles once, when it starts, about how its jobs run: who they run as
(a uid per attempt, ``uids.py``, or one user, ``isolation.py``), where their directories
live, which node paths they may copy, what the node enforces of their limits and how
their processes start (``jobplan.py``). Blocking: it probes the node and sweeps what an
earlier run of the agent left. See ``docs/agent.md`` (Isolation on a shared node).
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from runplane.agent import credentials
from runplane.agent.container import bwrap_as_user_works, driver_files
from runplane.agent.gvisor import probe_runsc
from runplane.agent.isolation import (
    DEFAULT_WORK_PARENT,
    HostPaths,
    JobUser,
    RunAsError,
    prepare_work_root,
    protect_data_dir,
    resolve_job_user,
)
from runplane.agent.jobplan import Executor, NodeRules
from runplane.agent.launch import find_setpriv
from runplane.agent.limits import probe
from runplane.agent.uids import DEFAULT_LOCK_DIR, UidPool, UidRange

log = logging.getLogger("runplane.agent")

#: Capabilities of how jobs are kept apart: each attempt runs as a uid of its own; or the
#: jobs share one uid but the operator lets jobs of several orgs run at once
#: (``--shared-uid-ok``). A node with neither runs one org's jobs at a time (placement;
#: the same names: ``runplane/placement/model.py``).
UID_PER_JOB = "uid-per-job"
SHARED_UID_OK = "shared-uid-ok"
UID_CAPABILITIES = frozenset({UID_PER_JOB, SHARED_UID_OK})


@dataclass(frozen=True, slots=True)
class SetupOptions:
    """The agent's flags about its jobs (``runplane agent --help``)."""

    data_dir: Path
    name: str | None = None
    run_as: str | None = None
    uid_range: UidRange | None = None
    uid_lock_dir: Path | None = None
    shared_uid_ok: bool = False
    work_dir: Path | None = None
    host_paths: tuple[Path, ...] = ()
    executor: Executor = "process"
    best_effort_limits: bool = False
    #: False: do not look for cgroups (tests of many agents in one process)
    enforce_limits: bool = True


class SetupFlags(TypedDict, total=False):
    """The agent's flags about its jobs, as :class:`~runplane.agent.client.Agent`
    takes them (made :class:`SetupOptions` by :func:`setup_options`; ``runplane agent --help``)."""

    host_paths: Sequence[Path | str]
    run_as: str | None
    uid_range: str | UidRange | None
    uid_lock_dir: Path | None
    shared_uid_ok: bool
    work_dir: Path | None
    best_effort_limits: bool
    #: False: do not look for cgroups (tests of many agents in one process)
    enforce_limits: bool


def setup_options(
    data_dir: Path, name: str | None, executor: str, flags: SetupFlags
) -> SetupOptions:
    """The options ``flags`` (and the executor: "process" unless "sandbox" or
    "container") say."""
    uid_range = flags.get("uid_range")
    chosen: Executor = "process"
    if executor in ("sandbox", "container"):
        chosen = "sandbox" if executor == "sandbox" else "container"
    return SetupOptions(
        data_dir=data_dir,
        name=name,
        run_as=flags.get("run_as"),
        uid_range=UidRange.parse(uid_range) if isinstance(uid_range, str) else uid_range,
        uid_lock_dir=flags.get("uid_lock_dir"),
        shared_uid_ok=flags.get("shared_uid_ok", False),
        work_dir=flags.get("work_dir"),
        host_paths=tuple(Path(p) for p in flags.get("host_paths", ())),
        executor=chosen,
        best_effort_limits=flags.get("best_effort_limits", False),
        enforce_limits=flags.get("enforce_limits", True),
    )


@dataclass(slots=True)
class NodeSetup:
    """What :func:`settle` found and decided."""

    work_root: Path
    host_paths: HostPaths
    rules: NodeRules
    #: the one user every job runs as (``--run-as``); None: the agent's own, or a pool
    job_user: JobUser | None = None
    #: a uid per attempt (a root agent without ``--run-as``)
    uids: UidPool | None = None
    capabilities: list[str] = field(default_factory=list)


def settle(options: SetupOptions) -> NodeSetup:
    """Settle who jobs run as, where their directories live, which node paths they may
    copy, and what the node enforces (raises RunAsError or OSError, saying what to do)."""
    user = resolve_job_user(options.run_as)
    pool: UidPool | None = None
    if os.geteuid() == 0 and not options.run_as and not os.environ.get("RP_NO_POOL"):
        pool = UidPool(
            options.uid_range or UidRange.default(), options.uid_lock_dir or DEFAULT_LOCK_DIR
        )
        pool.check()
    data_dir = options.data_dir
    if user is not None or pool is not None:
        protect_data_dir(data_dir, data_dir / credentials.CREDENTIAL_FILE)
    reaching = user if user is not None else pool.representative if pool else None
    work_root = prepare_work_root(data_dir, reaching, options.work_dir)
    if pool is not None:
        _sweep(pool, work_root)
    host_paths = HostPaths.of(options.host_paths, [data_dir, work_root])
    _log_isolation(options, user, pool, work_root, host_paths)
    rules = _rules(options, reaching, work_root, with_user=pool is None)
    if pool is not None:
        capabilities = [UID_PER_JOB]
    else:
        capabilities = [SHARED_UID_OK] if options.shared_uid_ok else []
    return NodeSetup(work_root, host_paths, rules, user, pool, capabilities)


def _sweep(pool: UidPool, work_root: Path) -> None:
    swept = pool.sweep_stale(work_root)
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


def _log_isolation(
    options: SetupOptions,
    user: JobUser | None,
    pool: UidPool | None,
    work_root: Path,
    host_paths: HostPaths,
) -> None:
    if pool is not None:
        run_as = f"a uid of its own per attempt ({pool.uids})"
    else:
        run_as = user.name if user is not None else "(the agent's own user)"
    fields = {
        "run_as": run_as,
        "work_root": str(work_root),
        "host_paths": [str(p) for p in host_paths.allowed],
    }
    log.info("job isolation", extra=fields)
    if pool is None:
        who = user.name if user is not None else "the agent's own user"
        root = os.geteuid() == 0
        why = (
            f"--run-as {options.run_as}"
            if root
            else "the agent is not root: it cannot switch users"
        )
        if options.shared_uid_ok:
            mixing = "jobs of several orgs may still run here at once (--shared-uid-ok)"
        else:
            mixing = "placement runs one org's jobs at a time here (--shared-uid-ok: several)"
        log.warning(
            f"every job runs as {who} ({why}): a job can read another running job's "
            f"environment and files and signal its processes; {mixing}",
            extra={"shared_uid": True},
        )
    if user is None and pool is None and os.geteuid() == 0:
        log.warning("jobs run as root (--run-as root): they can read the node credential")


def _rules(
    options: SetupOptions, user: JobUser | None, work_root: Path, *, with_user: bool
) -> NodeRules:
    """What this node enforces of jobs' limits and how their processes start (probes).
    ``with_user``: the launch switches to ``user`` (else each attempt's own uid is put in
    its launch by the job runner)."""
    enforcement = probe(want_cgroups=options.enforce_limits)
    if options.executor == "sandbox" and enforcement.bwrap is None:
        raise RunAsError(
            "--executor sandbox needs bubblewrap able to create namespaces here "
            "(apt-get install bubblewrap; in a container, allow user namespaces)"
        )
    if options.executor == "container":
        _check_container(enforcement.bwrap, user)
    setpriv = find_setpriv()
    wraps = enforcement.cgroups is not None or enforcement.bwrap is not None
    if user is not None and wraps and setpriv is None:
        raise RunAsError(
            f"running jobs as {user.name} with limits needs setpriv (util-linux) on PATH"
        )
    data_dir = options.data_dir
    rules = NodeRules(
        node=options.name or "",
        executor=options.executor,
        enforcement=enforcement,
        best_effort=options.best_effort_limits,
        user=user if with_user else None,
        hidden=tuple(dict.fromkeys((data_dir.absolute(), work_root, DEFAULT_WORK_PARENT))),
        setpriv=setpriv or "setpriv",
    )
    if options.executor == "container":
        rules.driver_files = driver_files()
        rules.runsc, why = probe_runsc(data_dir.absolute() / "runsc")
        if rules.runsc is None:
            log.warning(f"isolation gvisor is not available here: {why}")
    cgroups = enforcement.cgroups
    log.info(
        "job limits",
        extra={
            "executor": options.executor,
            "cgroups": cgroups.version if cgroups else None,
            "controllers": sorted(cgroups.controllers) if cgroups else [],
            "bwrap": enforcement.bwrap,
            "capabilities": rules.capabilities(),
            "not_enforced": list(enforcement.notes),
            "best_effort": options.best_effort_limits,
        },
    )
    return rules


#: What the container executor needs on PATH besides bubblewrap (the image store).
CONTAINER_TOOLS = {"skopeo": "skopeo", "umoci": "umoci"}


def _check_container(bwrap: str | None, user: JobUser | None) -> None:
    """Refuse ``--executor container`` where images cannot be pulled or run."""
    if bwrap is None:
        raise RunAsError(
            "--executor container needs bubblewrap able to create namespaces here "
            "(apt-get install bubblewrap; in a container, allow user namespaces)"
        )
    missing = [tool for tool in CONTAINER_TOOLS if shutil.which(tool) is None]
    if missing:
        packages = " ".join(CONTAINER_TOOLS[t] for t in missing)
        raise RunAsError(
            f"--executor container needs {' and '.join(missing)} on PATH to pull and "
            f"unpack images (apt-get install {packages})"
        )
    if user is not None and not bwrap_as_user_works(bwrap, user):
        raise RunAsError(
            f"--executor container starts bubblewrap as the job user ({user.name}) in a "
            "user namespace of its own, which this node refuses; allow unprivileged user "
            "namespaces (sysctl user.max_user_namespaces > 0, "
            "kernel.unprivileged_userns_clone=1 where it exists)"
        )


def reported_capabilities(
    detected: Sequence[str], own: Sequence[str], extra: Sequence[str]
) -> list[str]:
    """The facts' capabilities: those detected, then the agent's own (limits, executor,
    job uids), then the operator's ``--capability`` ones; capabilities about job uids are
    the agent's alone to report (an operator's or a stale one is dropped)."""
    claimed = [c for c in extra if c not in UID_CAPABILITIES]
    if len(claimed) < len(extra):
        log.warning(
            "capabilities about job uids are the agent's own to report: ignored",
            extra={"ignored": sorted(set(extra) & UID_CAPABILITIES)},
        )
    kept = [c for c in detected if c not in UID_CAPABILITIES or c in own]
    return list(dict.fromkeys([*kept, *own, *claimed]))
