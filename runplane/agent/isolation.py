"""What a job on this node may touch: the user it runs as, where its working directory
lives, which node paths its inputs may copy, and which ``isolation`` it can be given.
See ``docs/executor.md`` (Isolation) and ``docs/agent.md`` for the operator's view.

**Who jobs run as.** An agent running as root gives every attempt a uid and gid of its
own (``uids.py``; ``--uid-range``), never root. ``--run-as USER`` runs every job as that
one existing user instead (``--run-as root``: as root, the opt-out). The agent's data dir
(0700) and its node credential (0600), both owned by root, are then out of the jobs'
reach. An agent that is not root runs jobs as itself (it cannot switch users): jobs can
then read its data dir, and each other's.

**Working directories.** Without a job user they live in ``<data dir>/jobs`` as before.
With one, the private data dir cannot hold them (the job user could not reach them), so
they live under a separate work root: ``--work-dir``, by default
``/var/lib/runplane/jobs-<12 hex digits of the data dir's path>``. The work root and each
job's directory are 0711 and owned by root (reachable, not listable, only root creates
entries there); an attempt's directory is 0700 and handed to the job user just before its
first process starts. The job user must be able to traverse every parent of the work
root; the agent checks that at start.

**Host paths.** A ``file`` or ``dir`` input, or a ``git`` repository given as a node path,
copies from the node only under a directory the operator allows (``--host-path DIR``,
nothing by default), judged on the path with every symlink followed, and never from the
agent's data dir or the work root, even when an allowed directory holds them.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import pwd
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

#: Where the work roots of agents with a job user live unless ``--work-dir`` says.
DEFAULT_WORK_PARENT = Path("/var/lib/runplane")
#: What the process executor gives of a job's ``isolation``: no sandbox.
PROCESS_ISOLATIONS = frozenset({"none"})
HOST_PATH_FLAG = "runplane agent --host-path DIR"


class RunAsError(Exception):
    """The job user or work root cannot be used; the message says what to do."""


class HostPathRefused(Exception):
    """A node path an input may not copy; the message says why and what to do."""


@dataclass(frozen=True, slots=True)
class JobUser:
    """The unprivileged user a root agent's jobs run as (no supplementary groups)."""

    name: str
    uid: int
    gid: int


# --------------------------------------------------------------------------- the job user


def resolve_job_user(run_as: str | None) -> JobUser | None:
    """The one user every job runs as (``--run-as USER``); None: no such user (a root
    agent gives each attempt a uid of its own, ``uids.py``; any other runs jobs as
    itself). A ``run_as`` naming the agent's own user (``root`` for a root agent: the
    opt-out) means no switch."""
    if not run_as:
        return None
    euid = os.geteuid()
    try:
        entry = pwd.getpwnam(run_as)
    except KeyError:
        raise RunAsError(
            f"--run-as {run_as}: no such user on this node; create it (an unprivileged "
            "user with a group of its own), or leave --run-as out (a root agent then gives "
            "every job a uid of its own)"
        ) from None
    if entry.pw_uid == euid:
        return None  # the agent's own user: nothing to switch
    if euid != 0:
        raise RunAsError(
            f"--run-as {run_as}: only an agent running as root can run jobs as another user; "
            "leave --run-as out (jobs run as the agent's own user)"
        )
    if entry.pw_gid == 0:
        raise RunAsError(
            f"--run-as {run_as}: its primary group is root (gid 0), which would let jobs read "
            "root's group-readable files; give it a group of its own"
        )
    return JobUser(run_as, entry.pw_uid, entry.pw_gid)


def protect_data_dir(data_dir: Path, credential: Path) -> None:
    """Make the data dir (0700) and the credential (0600) the agent's alone."""
    st = os.lstat(data_dir)
    if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid():
        raise RunAsError(
            f"data dir {data_dir} must be a directory owned by the agent's user (uid "
            f"{os.geteuid()}), not uid {st.st_uid}: jobs could reach the credential"
        )
    os.chmod(data_dir, 0o700)
    if credential.exists():
        os.chmod(credential, 0o600)


# --------------------------------------------------------------------------- the work root


def default_work_root(data_dir: Path) -> Path:
    digest = hashlib.sha256(os.path.realpath(data_dir).encode()).hexdigest()[:12]
    return DEFAULT_WORK_PARENT / f"jobs-{digest}"


def release_work_root(root: Path, data_dir: Path) -> None:
    """At the agent's stop: remove the default work root outside the data dir when no job
    directory is left in it, so agents that come and go (tests, quick starts) leave nothing
    under /var/lib/runplane. ``--work-dir`` is the operator's and stays."""
    if root == default_work_root(data_dir):
        with contextlib.suppress(OSError):
            root.rmdir()  # only when empty


def prepare_work_root(data_dir: Path, user: JobUser | None, work_dir: Path | None) -> Path:
    """Where job working directories live (see the module doc); created and checked."""
    if work_dir is None and user is None:
        root = data_dir / "jobs"
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return root
    root = Path(os.path.abspath(work_dir if work_dir is not None else default_work_root(data_dir)))
    if not root.exists():
        for parent in reversed(root.parents):  # parents the agent creates are 0755
            if not parent.exists():
                parent.mkdir(mode=0o755)
        root.mkdir(mode=0o711 if user is not None else 0o700)
    if user is None:
        return root
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise RunAsError(
            f"work dir {root} must be a directory owned by the agent's user (uid "
            f"{os.geteuid()}), not a symlink or another user's: pass another --work-dir"
        )
    os.chmod(root, 0o711)  # the job user may pass through, not list
    blocked = unreachable_parent(root, user)
    if blocked is not None:
        mode = stat.S_IMODE(os.stat(blocked).st_mode)
        raise RunAsError(
            f"work dir {root}: the job user {user.name} cannot reach it ({blocked} is mode "
            f"{mode:04o}); pass a --work-dir whose parents others may traverse (o+x), e.g. "
            f"under {DEFAULT_WORK_PARENT}"
        )
    return root


def may_execute(st: os.stat_result, user: JobUser) -> bool:
    """Whether ``user`` (its primary group only) has the execute (search) bit of a file
    or directory with status ``st``."""
    if st.st_uid == user.uid:
        bit = stat.S_IXUSR
    elif st.st_gid == user.gid:
        bit = stat.S_IXGRP
    else:
        bit = stat.S_IXOTH
    return bool(st.st_mode & bit)


def unreachable_parent(path: Path, user: JobUser) -> Path | None:
    """The first directory from ``/`` down to ``path`` that ``user`` (its primary group
    only) may not traverse; None when it reaches ``path``."""
    for directory in [*reversed(path.parents), path]:
        if not may_execute(os.stat(directory), user):
            return directory
    return None


def make_workdir(workdir: Path, root: Path) -> None:
    """Create a fresh attempt directory (0700, the agent's) under ``root``; the directories
    between are 0711. A leftover of the same attempt is removed first."""
    current = root
    for part in workdir.relative_to(root).parts[:-1]:
        current = current / part
        try:
            current.mkdir(mode=0o711)
        except FileExistsError:
            if not current.is_dir() or current.is_symlink():
                raise
    if os.path.lexists(workdir):
        shutil.rmtree(workdir)
    workdir.mkdir(mode=0o700)


def hand_over(top: Path, user: JobUser) -> None:
    """Give ``top`` and everything in it to ``user``. ``top`` must still be the agent's
    (0700): its contents are changed first, ``top`` itself last, so no process of the job
    user can enter and swap a directory for a symlink while this walks the tree."""
    for dirpath, dirnames, filenames in os.walk(top, topdown=False):
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), user.uid, user.gid)
    os.lchown(top, user.uid, user.gid)


# --------------------------------------------------------------------------- host paths


@dataclass(frozen=True, slots=True)
class HostPaths:
    """The node paths inputs may copy: under ``allowed``, never under ``private`` (both
    real paths, symlinks resolved)."""

    allowed: tuple[Path, ...] = ()
    private: tuple[Path, ...] = ()

    @classmethod
    def of(cls, allowed: Iterable[Path | str], private: Iterable[Path | str]) -> HostPaths:
        def real(paths: Iterable[Path | str]) -> tuple[Path, ...]:
            return tuple(dict.fromkeys(Path(os.path.realpath(p)) for p in paths))

        return cls(real(allowed), real(private))

    def check(self, path: Path) -> Path:
        """The real path (symlinks followed) of ``path`` when an input may copy it; else
        :class:`HostPathRefused` saying why."""
        real = Path(os.path.realpath(path))
        via = f" (it resolves to {real})" if real != path else ""
        if any(_under(real, p) for p in self.private):
            raise HostPathRefused(
                f"{path}{via} is inside the agent's own data dir or job working directories: "
                "no input may copy from there"
            )
        if not any(_under(real, p) for p in self.allowed):
            allowed = ", ".join(str(p) for p in self.allowed) or "none"
            raise HostPathRefused(
                f"{path}{via} is not under a host path this node allows (allowed: {allowed}); "
                f"the node's operator allows host paths with `{HOST_PATH_FLAG}`, or send "
                "the data as an upload or an http(s) URL instead"
            )
        return real

    def check_open(self, fd: int, path: Path) -> None:
        """Check again, on what ``fd`` (opened from ``path``) really is, so that a path
        changed between :meth:`check` and the open cannot lead elsewhere (Linux only)."""
        try:
            opened = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return  # no /proc: the check before the open stands
        self.check(Path(opened))


def _under(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


# --------------------------------------------------------------------------- isolation


def isolation_refusal(
    isolation: str | None,
    node: str,
    executor: str = "process",
    given: frozenset[str] = frozenset(),
) -> str | None:
    """Why this node cannot run a job asking ``isolation``; None when it can. ``given``:
    what this node's executor gives beyond ``none`` (``gvisor`` on a container node whose
    runsc passed the probe). ``kata`` is never given: a kata runtime found on the node is
    named in the reason, but running it is not supported yet."""
    if isolation is None or isolation in PROCESS_ISOLATIONS or isolation in given:
        return None
    how = {
        "process": "runs jobs as plain processes",
        "sandbox": "runs jobs in bubblewrap namespaces on the host kernel",
    }.get(executor, "runs jobs in their images with bubblewrap")
    if executor == "container" and isolation == "gvisor":
        how = "has no runsc that passed its probe at agent start (see the agent's log)"
    if isolation == "kata" and shutil.which("kata-runtime") is not None:
        how += "; a kata runtime is installed, but runplane does not run kata yet"
    needs = "a container executor (a node" if executor != "container" else "a node"
    return (
        f"node {node} cannot give isolation {isolation}: its {executor} executor {how}; "
        f"{isolation} needs {needs} with the capability isolation-{isolation}"
        + (")" if executor != "container" else "")
    )
