"""How a job's processes start when a limit or the sandbox applies: the argv prefix that
puts each process in the job's cgroups, in its namespaces and under its user *before* the
job's own program runs (``docs/executor.md``, Limits and the sandbox).

The chain, each link only when needed, each one exec'ing the next::

    sh -c 'echo $$ > <cgroup.procs>...; exec "$@"'   joins the job's cgroups (as the agent)
    bwrap ...                                        namespaces: sandbox, or no_internet
    setpriv --reuid U --regid G --clear-groups       drops to the job user
    <program> <args>

The first process writes its own pid into the cgroups and only then execs, so nothing
the job runs or forks starts outside them. bubblewrap runs as the agent (root or not);
with a job user, ``setpriv`` switches to it inside, after the namespaces are set up.
Without any of it the executor starts the program directly, as before.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runplane.agent.cgroups import JobCgroup
from runplane.agent.isolation import JobUser, may_execute, unreachable_parent

#: The cgroup-joining first link (``$1..`` are cgroup.procs files up to ``--``).
JOIN_SCRIPT = (
    'while [ "$1" != -- ]; do echo $$ > "$1" || '
    '{ echo "runplane: cannot join the job cgroup $1" >&2; exit 125; }; shift; done; '
    'shift; exec "$@"'
)
#: Where the sandbox shows the job its streams directory (``runplane/agent/streams.py``).
SANDBOX_STREAMS_DIR = "/streams"
#: Entries of the host's ``/`` the sandbox does not bind (it makes its own, or shows the
#: streams directory there).
_OWN_TOP_LEVEL = frozenset({"dev", "proc", "tmp", SANDBOX_STREAMS_DIR.strip("/")})
#: Devices a CUDA program needs besides its own ``/dev/nvidia<N>`` (bound when present).
NVIDIA_CONTROL_DEVICES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)


@dataclass(frozen=True, slots=True)
class Runsc:
    """A ``runsc`` that passed the agent's probe run (``gvisor.py``)."""

    path: str
    version: str
    #: its state directory (``runsc --root``): the agent's own
    root: Path


class CommandNotFound(Exception):
    """The program is not on the job's PATH (or not there for the job's user)."""


class CommandNotExecutable(Exception):
    """The program exists but the job's user may not run it."""


@dataclass(frozen=True, slots=True)
class Launch:
    """One job's way of starting its processes (see the module doc)."""

    cgroup: JobCgroup | None = None
    #: path of bwrap; with ``sandbox`` or ``no_internet`` the processes run inside it
    bwrap: str | None = None
    sandbox: bool = False
    no_internet: bool = False
    user: JobUser | None = None
    #: directories the sandbox hides behind an empty tmpfs (data dir, work roots)
    hidden: tuple[Path, ...] = ()
    #: GPU indices the sandbox lets the job see (``/dev/nvidia<N>``)
    gpu_indices: tuple[int, ...] = ()
    #: paths inside the workdir the sandbox binds read-only (``mode: ro`` mounts)
    read_only: tuple[Path, ...] = ()
    setpriv: str = "setpriv"
    #: the host's NVIDIA driver files an image job with GPUs gets bound in (container.py)
    driver_files: tuple[Path, ...] = ()
    #: gVisor for ``isolation: gvisor`` image jobs (gvisor.py); None: not on this node
    runsc: Runsc | None = None
    #: the limits the cgroup holds (None: not limited)
    ram_gb: float | None = None
    cpu_cores: float | None = None
    pids: int | None = None

    def setup(self) -> None:
        """Create the job's cgroup with its limits (blocking). Raises OSError."""
        if self.cgroup is not None:
            ram = round(self.ram_gb * 1024**3) if self.ram_gb else None
            self.cgroup.create(ram_bytes=ram, cpu_cores=self.cpu_cores, pids=self.pids)

    def teardown(self) -> int:
        """Kill whatever of the job is left in its cgroup and remove it (blocking); how
        many processes were killed."""
        if self.cgroup is None:
            return 0
        killed = self.cgroup.kill_all()
        self.cgroup.remove()
        return killed

    def out_of_memory(self) -> bool:
        """Whether the kernel killed a process of the job at its memory limit."""
        return self.cgroup is not None and self.ram_gb is not None and self.cgroup.oom_kills() > 0

    @property
    def namespaced(self) -> bool:
        return self.bwrap is not None and (self.sandbox or self.no_internet)

    @property
    def sandboxed(self) -> bool:
        """Whether the processes run in the sandbox (the host read-only, ``/streams``)."""
        return self.bwrap is not None and self.sandbox

    @property
    def wraps(self) -> bool:
        """Whether processes start through the chain (else: the program directly)."""
        return self.cgroup is not None or self.namespaced

    def argv(
        self,
        argv: Sequence[str],
        workdir: Path,
        writable: Sequence[Path] = (),
        streams: Path | None = None,
    ) -> list[str]:
        """The full argv of one process of the job: the chain, then ``argv`` (its program
        already resolved, :func:`resolve_program`). ``writable``: more directories the
        sandbox binds read-write (the requirements install target); ``streams``: the job's
        streams directory, which the sandbox binds read-write at its path and at
        :data:`SANDBOX_STREAMS_DIR`."""
        out: list[str] = []
        if self.cgroup is not None:
            out += ["/bin/sh", "-c", JOIN_SCRIPT, "runplane-join", *self.cgroup.procs_files, "--"]
        if self.namespaced:
            assert self.bwrap is not None
            out += self._bwrap(workdir, writable, streams)
        if self.user is not None:
            out += [self.setpriv, f"--reuid={self.user.uid}", f"--regid={self.user.gid}"]
            out += ["--clear-groups", "--"]
        return out + list(argv)

    def _bwrap(self, workdir: Path, writable: Sequence[Path], streams: Path | None) -> list[str]:
        assert self.bwrap is not None
        if not self.sandbox:  # no_internet on the process executor: the host as it is
            return [self.bwrap, "--dev-bind", "/", "/", "--unshare-net", "--die-with-parent", "--"]
        # The host's / read-only, entry by entry over bubblewrap's own root (a tmpfs, made
        # read-only last), so that /streams can exist here without existing on the host.
        args = [self.bwrap, *_host_root(), "--dev", "/dev", "--proc", "/proc"]
        # a private /tmp and /dev/shm everyone in the sandbox may write (sticky, as usual)
        args += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm"]
        for index in self.gpu_indices:
            args += _dev_bind(f"/dev/nvidia{index}")
        if self.gpu_indices:
            for device in NVIDIA_CONTROL_DEVICES:
                args += _dev_bind(device)
        for hidden in self.hidden:
            if os.path.isdir(hidden):
                args += ["--tmpfs", str(hidden)]
        own = [workdir, *writable] + ([streams] if streams is not None else [])
        for directory in own:
            args += ["--bind", str(directory), str(directory)]
        if streams is not None:
            args += ["--bind", str(streams), SANDBOX_STREAMS_DIR]
        for ro in self.read_only:
            if os.path.lexists(ro):
                args += ["--ro-bind", str(ro), str(ro)]
        args += ["--remount-ro", "/"]
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if self.no_internet:
            args.append("--unshare-net")
        args += ["--die-with-parent", "--chdir", str(workdir), "--"]
        return args


def _host_root() -> list[str]:
    """bubblewrap arguments showing every entry of the host's ``/`` read-only (symlinks
    as symlinks) but ``/dev``, ``/proc``, ``/tmp`` and ``/streams``."""
    args: list[str] = []
    with os.scandir("/") as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.name in _OWN_TOP_LEVEL:
                continue
            path = f"/{entry.name}"
            if entry.is_symlink():
                args += ["--symlink", os.readlink(path), path]
            elif entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
                args += ["--ro-bind", path, path]
    return args


def _dev_bind(path: str) -> list[str]:
    return ["--dev-bind", path, path] if os.path.exists(path) else []


def resolve_program(program: str, path_var: str | None, cwd: Path, user: JobUser | None) -> str:
    """The file ``program`` runs, as the job would find it: a name is looked up on
    ``path_var`` (a directory or file its user cannot reach is passed over, as ``execvp``
    does), a path is taken relative to ``cwd``. Raises :class:`CommandNotFound` or
    :class:`CommandNotExecutable`."""
    if "/" in program:
        candidate = cwd / program
        if not candidate.is_file():
            raise CommandNotFound(program)
        if not _may_run(candidate, user):
            raise CommandNotExecutable(program)
        return str(candidate)
    denied = False
    for directory in (path_var or os.defpath).split(os.pathsep):
        candidate = (cwd / directory if directory else cwd) / program
        if not candidate.is_file():
            continue
        if _may_run(candidate, user):
            return str(candidate)
        denied = True
    if denied:
        raise CommandNotExecutable(program)
    raise CommandNotFound(program)


def _may_run(path: Path, user: JobUser | None) -> bool:
    if user is None:
        return os.access(path, os.X_OK)
    try:
        if unreachable_parent(path.parent.absolute(), user) is not None:
            return False
        return may_execute(path.stat(), user)
    except OSError:
        return False


def find_setpriv() -> str | None:
    return shutil.which("setpriv")


def start_error(program: str, workdir: Path, exc: OSError | ValueError) -> str:
    """Why ``program`` did not start (in ``workdir``), in the words of a job's log."""
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
