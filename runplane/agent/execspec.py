"""The executor's contract (``docs/executor.md``): what the agent hands it
(:class:`ExecSpec`, a pod's :class:`PodService`) and what it reports (:class:`Started`,
:class:`LogLines`, :class:`Metric`, then exactly one :class:`Finished`)."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, TypeAlias

import trio

from runplane.agent.isolation import JobUser
from runplane.agent.launch import SANDBOX_STREAMS_DIR, Launch
from runplane.agent.protocol import PodServiceSpec
from runplane.agent.streams import STREAMS_ENV

Stream: TypeAlias = Literal["stdout", "stderr", "system"]
Outcome: TypeAlias = Literal["succeeded", "failed", "timeout", "cancelled"]
Stage: TypeAlias = Literal["setup", "requirements", "command"]

# PATH for the job when the agent itself has none.
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Where an image job sees its working directory (the spec's ``/work``) and its streams
#: directory (``runplane/agent/container.py``).
CONTAINER_WORKDIR = "/work"
CONTAINER_STREAMS = "/streams"


@dataclass(frozen=True, slots=True)
class ImageConfig:
    """What an image's config says about running it (OCI image config ``config``)."""

    env: tuple[str, ...] = ()  # "KEY=value"
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    working_dir: str = ""
    user: str = ""


@dataclass(frozen=True, slots=True)
class Rootfs:
    """An image unpacked in the node's cache (``runplane/agent/images/``): its digest, its
    root filesystem (read-only to jobs: never changed once unpacked) and its config."""

    digest: str
    path: Path
    config: ImageConfig = ImageConfig()


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
    #: the image the job runs in (``runplane/agent/container.py``); None: on the host
    image: Rootfs | None = None
    #: ``gvisor``: the job's image runs under ``runsc`` instead of bubblewrap
    isolation: str | None = None


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
    #: the service's own image; None: the job's (or the host's, for a host job)
    image: Rootfs | None = None


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


#: Where a preempted job finds why (written before its SIGTERM; docs/jobs.md "Preemption"):
#: the file's name in its work directory, and the variable giving its path.
PREEMPT_FILE = ".runplane-preempted"
PREEMPT_ENV = "RUNPLANE_PREEMPT_FILE"


def note_preempted(workdir: Path, by: str, grace_sec: float) -> None:
    """Write the preemption hint into the job's work directory (best effort)."""
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    # its directory may not be there (yet, or any more): the SIGTERM still says it
    with contextlib.suppress(OSError):
        (workdir / PREEMPT_FILE).write_text(
            f"preempted by {by} at {stamp}, grace {grace_sec:g} s\n"
        )


class CancelSignal(Protocol):
    """What :func:`run_job` needs of a cancel request; :class:`trio.Event` is one."""

    def is_set(self) -> bool: ...

    async def wait(self) -> None: ...


def job_environment(spec: ExecSpec, agent_env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment the job's processes get.

    A minimal base (PATH and LANG from the agent when set, HOME = the workdir,
    ``PYTHONUNBUFFERED=1``, ``RUNPLANE_JOB_ID``) with ``spec.env`` on top, then
    ``RUNPLANE_STREAMS_DIR`` when the job has a streams directory. Nothing else of the
    agent's own environment (tokens, ``RUNPLANE_*`` settings, cloud credentials) is
    passed on. An image job's: :func:`container_env`.
    """
    if spec.image is not None:
        return container_env(spec, spec.image)
    agent = os.environ if agent_env is None else agent_env
    env = {
        "PATH": agent.get("PATH") or DEFAULT_PATH,
        "HOME": str(spec.workdir.absolute()),
        "LANG": agent.get("LANG") or "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "RUNPLANE_JOB_ID": spec.job_id,
        PREEMPT_ENV: str(spec.workdir.absolute() / PREEMPT_FILE),
    }
    env.update(spec.env)
    if spec.streams_dir is not None:
        sandboxed = spec.launch is not None and spec.launch.sandboxed
        env[STREAMS_ENV] = SANDBOX_STREAMS_DIR if sandboxed else str(spec.streams_dir.absolute())
    return env


def container_env(
    spec: ExecSpec, rootfs: Rootfs, extra: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The environment inside the image: a minimal base (``PATH``, ``HOME=/work``,
    ``PYTHONUNBUFFERED``, ``RUNPLANE_JOB_ID``), the image's Env over it, then the job's
    env and ``extra`` (a pod service's), then ``RUNPLANE_STREAMS_DIR=/streams``; a GPU
    job's ``PATH`` ends with the directories of the driver programs bound in
    (``nvidia-smi``). Nothing of the node's environment (its PATH, LANG) is passed in."""
    env = {
        "PATH": DEFAULT_PATH,
        "HOME": CONTAINER_WORKDIR,
        "PYTHONUNBUFFERED": "1",
        "RUNPLANE_JOB_ID": spec.job_id,
        PREEMPT_ENV: f"{CONTAINER_WORKDIR}/{PREEMPT_FILE}",
    }
    for item in rootfs.config.env:
        key, sep, value = item.partition("=")
        if sep and key:
            env[key] = value
    env.update(spec.env)
    env.update(extra or {})
    if spec.streams_dir is not None:
        env[STREAMS_ENV] = CONTAINER_STREAMS
    launch = spec.launch
    if launch is not None and launch.gpu_indices:  # the bound driver programs' directories
        have = env.get("PATH", "").split(os.pathsep)
        dirs = [str(p.parent) for p in launch.driver_files if ".so" not in p.name]
        more = [d for d in dict.fromkeys(dirs) if d not in have]
        env["PATH"] = os.pathsep.join([*filter(None, have), *more])
    return env


def pod_services(
    pod: list[PodServiceSpec] | None, images: Mapping[str, Rootfs] | None = None
) -> tuple[PodService, ...]:
    """A run order's pod as the executor takes it (empty for a plain job); ``images``: the
    services' own images, unpacked (by service name)."""
    images = images or {}
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
            image=images.get(s.name),
        )
        for s in pod or ()
    )
