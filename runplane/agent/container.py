"""A job's processes inside its image with bubblewrap (``docs/containers.md``, Running
inside the image): the argv of one process, the environment, the working directory and the
user the image's config asks for.

What a process sees:

- ``/``: the image's rootfs from the node's cache, **read-only** (the cache is shared by
  every job of that digest). bubblewrap's own root is a tmpfs: every top-level entry of the
  rootfs is bound into it read-only (symlinks as symlinks) and the root made read-only
  last, so the job's mount points (``/work``, ``/streams``, a driver file) can exist even
  where the image has no such path; a directory on the way to one is rebuilt the same way.
- ``/proc``, ``/dev`` (``/dev/shm`` a tmpfs), ``/tmp`` and ``/run`` (tmpfs, the job's own);
- ``/work``: the job's working directory, read-write (its mounts are there, outputs are
  collected from there); ``mode: ro`` mounts bound read-only on top;
- ``/streams``: the job's streams directory (``RUNPLANE_STREAMS_DIR=/streams``);
- with network: the host's network, and its ``/etc/resolv.conf`` and ``/etc/hosts``;
  ``no_internet``: a network namespace of its own with loopback only;
- its own pid, ipc and uts namespaces (hostname ``job``), and assigned GPUs as
  ``/dev/nvidia<N>`` plus the control devices and the host's driver files
  (``libnvidia-*``, ``libcuda``, ``nvidia-smi``) bound read-only at their host paths, as
  nvidia-container-cli does; the directories of those programs are added to ``PATH``.

**Who it runs as.** Outside the container, always the attempt's own uid (``uids.py``) or
the agent's job user: bubblewrap then starts *as that user* (``setpriv`` first) in a user
namespace of its own, in which the image's ``User`` (a number, or a name looked up in the
image's ``/etc/passwd``; root when unset, as Docker does) is mapped onto it, without any
capability. So the job sees the uid its image expects, and every file it writes in
``/work`` belongs to the attempt's uid on the node. An agent that runs jobs as root
(``--run-as root``) starts bubblewrap as root without a user namespace: the image's
``User`` is not applied then (the job log says so).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import trio

from runplane.agent.execspec import CONTAINER_STREAMS, CONTAINER_WORKDIR, ExecSpec, Rootfs
from runplane.agent.isolation import JobUser
from runplane.agent.launch import JOIN_SCRIPT, NVIDIA_CONTROL_DEVICES, Launch

HOSTNAME = "job"
#: Mount points the container makes itself (never taken from the image).
_OWN = ("/proc", "/dev", "/tmp", "/run", CONTAINER_WORKDIR, CONTAINER_STREAMS)
_HOST_NET_FILES = ("/etc/resolv.conf", "/etc/hosts")
_DRIVER_LIB = re.compile(r"^(libnvidia-[\w.-]*|libcuda)\.so[\w.]*$")
_DRIVER_PROGRAMS = ("nvidia-smi",)
_PROBE_TIMEOUT_SEC = 10.0
#: Binds the rootfs ($2) read-only at the mount point ($3) with mount ($1), then execs.
_MOUNT_SCRIPT = (
    '"$1" --bind -o ro "$2" "$3" || { echo "runplane: cannot mount the image at $3" >&2; '
    'exit 125; }; shift 3; exec "$@"'
)


class ImageUserError(Exception):
    """The image's ``User`` names a user or group its ``/etc/passwd`` does not have."""


@dataclass(frozen=True, slots=True)
class Process:
    """One process of an image job, as the container starts it."""

    argv: list[str]
    env: dict[str, str]
    cwd: str


# --------------------------------------------------------------------------- the config


def command_of(spec: ExecSpec) -> list[str]:
    """The argv of the job's command; in an image: the image's Entrypoint, then the job's
    command, or the image's Cmd when the job gives none."""
    if spec.image is None:
        return list(spec.command)
    config = spec.image.config
    return [*config.entrypoint, *(spec.command or config.cmd)]


def working_dir(rootfs: Rootfs) -> str:
    """Where the job's processes start: the image's WorkingDir, else ``/work``."""
    return rootfs.config.working_dir or CONTAINER_WORKDIR


def image_user(rootfs: Rootfs) -> tuple[int, int]:
    """The uid and gid the image's ``User`` names (``uid``, ``uid:gid``, ``name``,
    ``name:group``; names from the image's ``/etc/passwd`` and ``/etc/group``); (0, 0)
    when unset. Raises :class:`ImageUserError`."""
    text = rootfs.config.user.strip()
    if not text:
        return 0, 0
    user, _, group = text.partition(":")
    passwd = _table(rootfs.path, "passwd")
    if user.isdigit():
        uid = int(user)
        gid = next((int(e[3]) for e in passwd if e[2] == user and e[3].isdigit()), uid)
    else:
        entry = next((e for e in passwd if e[0] == user), None)
        if entry is None or not (entry[2].isdigit() and entry[3].isdigit()):
            raise ImageUserError(f"the image's User {text!r}: no user {user!r} in its /etc/passwd")
        uid, gid = int(entry[2]), int(entry[3])
    if group:
        if group.isdigit():
            gid = int(group)
        else:
            found = next((e for e in _table(rootfs.path, "group") if e[0] == group), None)
            if found is None or not found[2].isdigit():
                raise ImageUserError(
                    f"the image's User {text!r}: no group {group!r} in its /etc/group"
                )
            gid = int(found[2])
    return uid, gid


def _table(rootfs: Path, name: str) -> list[list[str]]:
    """The entries of the image's ``/etc/<name>`` (never through a symlink: the image's
    files must not lead the agent to read the node's)."""
    etc = rootfs / "etc"
    path = etc / name
    if etc.is_symlink() or path.is_symlink() or not path.is_file():
        return []
    with open(path, encoding="utf-8", errors="replace") as f:
        return [line.rstrip("\n").split(":") for line in f if line.count(":") >= 3]


# --------------------------------------------------------------------------- the argv


def rootfs_args(
    rootfs: Path, mounts: Iterable[str], source: Path | None = None
) -> tuple[list[str], set[str]]:
    """bubblewrap arguments showing ``rootfs`` as ``/`` read-only over bubblewrap's tmpfs
    root, entry by entry (symlinks as symlinks; devices, FIFOs and sockets of the image
    skipped), leaving out each path in ``mounts`` (mounted later) and rebuilding each
    directory on the way to one (made with the image's mode, its entries bound); and the
    mounts that cannot be made (the image has a file or symlink on the way: kept).
    ``source``: where bubblewrap finds ``rootfs`` (the per-attempt mount point)."""
    top = rootfs if source is None else source
    targets = {tuple(Path(m).parts[1:]) for m in mounts}
    prefixes = {t[:i] for t in targets for i in range(1, len(t))}
    args: list[str] = []
    blocked: set[str] = set()

    def walk(rel: tuple[str, ...]) -> None:
        with os.scandir(rootfs.joinpath(*rel)) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                parts = (*rel, entry.name)
                path = "/" + "/".join(parts)
                if parts in targets:
                    continue
                if parts in prefixes and entry.is_dir(follow_symlinks=False):
                    mode = entry.stat(follow_symlinks=False).st_mode & 0o7777
                    args.extend(["--perms", f"{mode:04o}", "--dir", path])
                    walk(parts)
                    continue
                if parts in prefixes:  # a file or symlink where a mount needs a directory
                    blocked.update("/" + "/".join(t) for t in targets if t[: len(parts)] == parts)
                if entry.is_symlink():
                    args.extend(["--symlink", os.readlink(entry.path), path])
                elif entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
                    args.extend(["--ro-bind", str(top.joinpath(*parts)), path])

    walk(())
    return args, blocked


def driver_files(path_var: str | None = None) -> tuple[Path, ...]:
    """The host's NVIDIA driver files a GPU job's image gets bound in: the
    ``libnvidia-*.so*`` and ``libcuda.so*`` of the loader's cache (``ldconfig -p``) and
    ``nvidia-smi`` on ``path_var`` (the agent's PATH), each at its real path."""
    found: list[Path] = []
    try:
        listing = subprocess.run(
            ["ldconfig", "-p"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        listing = ""
    for line in listing.splitlines():
        name, arrow, target = line.strip().partition(" => ")
        if arrow and _DRIVER_LIB.match(name.split(" ", 1)[0]):
            found.append(Path(target.strip()))
    for program in _DRIVER_PROGRAMS:
        where = shutil.which(program, path=path_var)
        if where is not None:
            found.append(Path(where))
    real = (Path(os.path.realpath(p)) for p in found)
    return tuple(dict.fromkeys(p for p in real if p.is_file()))


def bwrap_as_user_works(bwrap: str, user: JobUser) -> bool:
    """Whether bubblewrap started as ``user`` can make the user namespace (and the others)
    an image job runs in (blocking: tried once with ``true``)."""
    setpriv = shutil.which("setpriv") or "setpriv"
    argv = [setpriv, f"--reuid={user.uid}", f"--regid={user.gid}", "--clear-groups", "--"]
    argv += [bwrap, "--unshare-user", "--uid", "0", "--gid", "0", "--unshare-pid"]
    argv += ["--unshare-net", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    try:
        done = subprocess.run(
            [*argv, "--", "true"], capture_output=True, timeout=_PROBE_TIMEOUT_SEC, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return done.returncode == 0


@dataclass(frozen=True, slots=True)
class Bwrap:
    """How one image job's processes start in bubblewrap (the module doc)."""

    launch: Launch
    rootfs: Rootfs
    workdir: Path
    streams: Path | None = None
    #: a pod's network namespace holder (its pid): the process joins it (``nsenter``)
    netns_pid: int | None = None

    @property
    def userns(self) -> bool:
        """Whether bubblewrap runs as the job's user in a user namespace."""
        return self.launch.user is not None or os.geteuid() != 0

    @property
    def mount_point(self) -> Path | None:
        """Where a root agent shows the job user the image's rootfs before bubblewrap
        starts as that user (who may not reach the agent's image cache): the rootfs bound
        read-only there in a mount namespace of the process's own, so nothing is mounted
        on the node. None: bubblewrap reads the cache itself."""
        if self.launch.user is None or os.geteuid() != 0:
            return None
        return self.workdir.with_name(f"{self.workdir.name}.rootfs")

    def argv(self, process: Process, ids: tuple[int, int] = (0, 0)) -> list[str]:
        """The full argv of ``process``: the cgroup join, the pod's network namespace,
        the switch to the job user, then bubblewrap (``ids``: the uid and gid it has
        inside, in the user namespace)."""
        launch = self.launch
        out: list[str] = []
        if launch.cgroup is not None:
            out += ["/bin/sh", "-c", JOIN_SCRIPT, "runplane-join", *launch.cgroup.procs_files, "--"]
        if self.netns_pid is not None:
            out += [_nsenter(), f"--net=/proc/{self.netns_pid}/ns/net", "--"]
        mount_point = self.mount_point
        if mount_point is not None:
            out += [shutil.which("unshare") or "unshare", "--mount", "--propagation", "private"]
            out += ["--", "/bin/sh", "-c", _MOUNT_SCRIPT, "runplane-rootfs"]
            out += [shutil.which("mount") or "mount", str(self.rootfs.path), str(mount_point)]
        if launch.user is not None:
            out += [launch.setpriv, f"--reuid={launch.user.uid}", f"--regid={launch.user.gid}"]
            out += ["--clear-groups", "--"]
        assert launch.bwrap is not None
        out.append(launch.bwrap)
        if self.userns:
            out += ["--unshare-user", "--uid", str(ids[0]), "--gid", str(ids[1])]
        out += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        # no_internet: a network namespace of its own, or the pod's (loopback only both)
        network = not launch.no_internet
        if launch.no_internet and self.netns_pid is None:
            out.append("--unshare-net")
        out += self._mounts(network)
        out += ["--hostname", HOSTNAME, "--die-with-parent", "--chdir", process.cwd]
        return [*out, "--", *process.argv]

    def _mounts(self, network: bool) -> list[str]:
        launch = self.launch
        gpus = launch.gpu_indices
        extra = [*_HOST_NET_FILES] if network else []
        drivers = [str(p) for p in launch.driver_files] if gpus else []
        mounts = [*_OWN, "/dev/shm", *extra, *drivers]
        args, blocked = rootfs_args(self.rootfs.path, mounts, self.mount_point)
        args += ["--proc", "/proc", "--dev", "/dev"]
        args += ["--perms", "1777", "--tmpfs", "/tmp", "--perms", "1777", "--tmpfs", "/dev/shm"]
        args += ["--perms", "0755", "--tmpfs", "/run"]
        for index in gpus:
            args += _dev_bind(f"/dev/nvidia{index}")
        for device in NVIDIA_CONTROL_DEVICES if gpus else ():
            args += _dev_bind(device)
        args += ["--bind", str(self.workdir), CONTAINER_WORKDIR]
        for ro in launch.read_only:
            if os.path.lexists(ro):
                inside = Path(CONTAINER_WORKDIR) / ro.relative_to(self.workdir)
                args += ["--ro-bind", str(ro), str(inside)]
        if self.streams is not None:
            args += ["--bind", str(self.streams), CONTAINER_STREAMS]
        for path in extra:
            if path not in blocked:
                args += ["--ro-bind-try", path, path]
        for path in drivers:
            if path not in blocked:
                args += ["--ro-bind", path, path]
        return [*args, "--remount-ro", "/"]


def _dev_bind(path: str) -> list[str]:
    return ["--dev-bind", path, path] if os.path.exists(path) else []


# --------------------------------------------------------------------------- one job


class ImageRun:
    """How one image job's processes start (bubblewrap, or runsc for ``isolation:
    gvisor``), and what it leaves to clean up (runsc containers and their bundles)."""

    @classmethod
    def of(cls, spec: ExecSpec, workdir: Path) -> ImageRun | None:
        """The job's, when it or a service of its pod has an image; else None."""
        images = spec.image is not None or any(s.image is not None for s in spec.pod)
        return cls(spec, workdir) if images or spec.isolation == "gvisor" else None

    def __init__(self, spec: ExecSpec, workdir: Path) -> None:
        self.spec = spec
        self.workdir = workdir
        #: a pod's network namespace holder (its pid), once started
        self.netns_pid: int | None = None
        self._containers: list[tuple[str, Path]] = []

    @property
    def gvisor(self) -> bool:
        return self.spec.isolation == "gvisor"

    def refusal(self) -> str | None:
        """Why this node cannot run the job's image; None when it can."""
        launch = self.spec.launch
        if launch is None or launch.bwrap is None:
            return (
                "this node cannot run jobs in their images: bubblewrap cannot create "
                "namespaces here (runplane agent --executor container needs it)"
            )
        if self.gvisor and self.spec.pod:
            return (
                "a pod cannot run under isolation gvisor yet: each service's sandbox would "
                "have a network stack of its own, so the services could not reach each "
                "other on localhost"
            )
        if self.gvisor and launch.runsc is None:
            return "this node cannot give isolation gvisor: runsc did not pass the agent's probe"
        if self.gvisor and self.spec.image is None:
            return "isolation gvisor runs a job in its image: this job has none (set its image)"
        return None

    async def start(self, system: Callable[[str], Awaitable[None]]) -> str | None:
        """Say what runs the job in its log (through ``system``); or why it cannot run
        here (nothing said then)."""
        refusal = self.refusal()
        if refusal is not None:
            return refusal
        images = [self.spec.image, *(s.image for s in self.spec.pod)]
        for rootfs in dict.fromkeys(i for i in images if i is not None):
            for line in self.describe(rootfs):
                await system(line)
        return None

    def describe(self, rootfs: Rootfs) -> list[str]:
        """System lines saying what runs the job (and how its image's User is applied)."""
        launch = self.spec.launch
        assert launch is not None
        if self.gvisor and launch.runsc is not None:
            lines = [f"runs in {rootfs.digest} with gVisor (runsc {launch.runsc.version})"]
        else:
            lines = [f"runs in {rootfs.digest} with bubblewrap"]
        wanted = rootfs.config.user
        if wanted and (self.gvisor or not self._bwrap(rootfs).userns):
            lines.append(
                f"the image's User {wanted!r} is not applied: the job runs as {self._who()}"
            )
        return lines

    def _who(self) -> str:
        user = self.spec.user
        return f"uid {user.uid}" if user is not None else f"uid {os.geteuid()}"

    def _bwrap(self, rootfs: Rootfs) -> Bwrap:
        streams = self.spec.streams_dir
        streams = streams.absolute() if streams is not None and streams.is_dir() else None
        assert self.spec.launch is not None
        return Bwrap(self.spec.launch, rootfs, self.workdir, streams, self.netns_pid)

    def argv(self, argv: Sequence[str], env: dict[str, str], rootfs: Rootfs) -> list[str]:
        """The full argv of one process of the job (blocking: a gVisor bundle is written).
        Raises :class:`ImageUserError`."""
        launch = self.spec.launch
        assert launch is not None
        process = Process(list(argv), env, working_dir(rootfs))
        if self.gvisor and launch.runsc is not None:
            return self._runsc(process, rootfs)
        bwrap = self._bwrap(rootfs)
        ids = image_user(rootfs) if bwrap.userns else (0, 0)
        if bwrap.mount_point is not None:
            with contextlib.suppress(FileExistsError):  # (a pod's services share it)
                bwrap.mount_point.mkdir(mode=0o755)
                os.chmod(bwrap.mount_point, 0o755)
        return bwrap.argv(process, ids)

    async def wrap(
        self, argv: Sequence[str], env: dict[str, str], rootfs: Rootfs
    ) -> list[str] | str:
        """:meth:`argv` in a worker thread; why the process cannot start, as text."""
        try:
            return await trio.to_thread.run_sync(self.argv, argv, env, rootfs)
        except (ImageUserError, OSError) as exc:
            return f"cannot start in the image: {exc}"

    def _runsc(self, process: Process, rootfs: Rootfs) -> list[str]:
        from runplane.agent import gvisor

        launch = self.spec.launch
        assert launch is not None and launch.runsc is not None
        bwrap = self._bwrap(rootfs)
        binds = [(str(self.workdir), CONTAINER_WORKDIR, True)]
        binds += [
            (str(ro), str(Path(CONTAINER_WORKDIR) / ro.relative_to(self.workdir)), False)
            for ro in launch.read_only
            if os.path.lexists(ro)
        ]
        if bwrap.streams is not None:
            binds.append((str(bwrap.streams), CONTAINER_STREAMS, True))
        network = not launch.no_internet
        if network:
            binds += [(p, p, False) for p in _HOST_NET_FILES if os.path.exists(p)]
        user = launch.user
        ids = (user.uid, user.gid) if user is not None else (0, 0)
        config = gvisor.bundle_config(
            root=rootfs.path, argv=process.argv, env=process.env, cwd=process.cwd, ids=ids,
            binds=binds, hostname=HOSTNAME,
        )  # fmt: skip
        safe = re.sub(r"[^\w.-]", "_", self.spec.job_id)
        container_id = f"runplane-{safe}-{os.getpid()}-{len(self._containers)}"
        bundle = launch.runsc.root / "bundles" / container_id
        gvisor.write_bundle(bundle, config)
        self._containers.append((container_id, bundle))
        out: list[str] = []
        if launch.cgroup is not None:
            out += ["/bin/sh", "-c", JOIN_SCRIPT, "runplane-join", *launch.cgroup.procs_files, "--"]
        if self.netns_pid is not None:
            out += [_nsenter(), f"--net=/proc/{self.netns_pid}/ns/net", "--"]
        network = network or self.netns_pid is not None
        return out + gvisor.run_argv(launch.runsc, bundle, container_id, network=network)

    def cleanup(self) -> None:
        """Delete every runsc container the job started and its bundle (blocking)."""
        from runplane.agent import gvisor

        with contextlib.suppress(OSError):
            self.workdir.with_name(f"{self.workdir.name}.rootfs").rmdir()
        launch = self.spec.launch
        while self._containers:
            container_id, bundle = self._containers.pop()
            if launch is not None and launch.runsc is not None:
                gvisor.delete(launch.runsc, container_id, bundle)


def _nsenter() -> str:
    return shutil.which("nsenter") or "nsenter"
