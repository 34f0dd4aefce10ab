"""Workspaces and inputs on the node: every Mount type, prepared while the job is ``pulling``.

:func:`prepare_mounts` puts each mount of a run order in the job's working directory (the
spec's ``/work``; the server sends paths relative to it):

=========  ==================================================================================
type       what the agent does with ``ref``
=========  ==================================================================================
inline     writes the text to the file at ``path`` (nothing when the text is empty)
archive    downloads the http(s) URL (an upload URL, any URL) and unpacks the .zip or .tar.gz
           into the directory at ``path``; entries that would land outside it (absolute
           names, ``..``, symlinks or hard links pointing out, devices) refuse the archive
git        ``<url>[#<branch, tag or commit>]``: fetched with the git CLI into ``path`` and
           checked out detached; the resolved commit is reported in a system log line
file       an http(s) URL downloaded as is, or a path on the node copied, to ``path``
dir        empty: an empty directory; an http(s) URL: an archive, as ``archive``; a path on
           the node: the directory copied (symlinks kept as links; devices, FIFOs and
           sockets skipped)
=========  ==================================================================================

A path on the node (a ``file``/``dir`` ref, or a ``git`` repository given as a path or a
``file://`` URL) is copied only under a directory the node's operator allows (``HostPaths``:
``runplane agent --host-path DIR``; nothing by default), judged with symlinks followed,
never from the agent's own data dir or job directories (``runplane/agent/isolation.py``).

``mode: ro`` removes every write permission bit from what the mount put there (once all
mounts are in place, so inputs can nest inside a read-only workspace); a mount at the
working directory itself keeps the directory writable so the job can still write outputs
next to its code. The job user owns what the mounts put there (it is handed over before
the first process starts), so ``ro`` guards against accidents, not against the job.

Any failure raises :class:`MountError`, whose message names the mount (``workspace`` or
``inputs[i]``), its type and ref; the agent fails the job with it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import trio

from runplane.agent.archives import Refused, unpack_archive
from runplane.agent.isolation import HostPathRefused, HostPaths
from runplane.agent.protocol import SERVER_REF, MountSpec
from runplane.artifacts.client import TransferError, download, redact_url

#: A git command that moves less than 1 KB/s for this long is given up.
GIT_LOW_SPEED_SEC = 60
_CHUNK = 1024 * 1024

Note = Callable[[str], Awaitable[None]]
#: No node path allowed: the default of a node whose operator allowed none.
NO_HOST_PATHS = HostPaths()


class MountError(Exception):
    """A mount could not be prepared; the message names it and says why."""


@dataclass(frozen=True, slots=True)
class Mount:
    name: str  # workspace | inputs[i]
    spec: MountSpec

    def describe(self) -> str:
        where = "/work" + (f"/{self.spec.path}" if self.spec.path else "")
        if self.spec.type == "inline":
            return f"{self.name} (inline at {where})"
        ref = redact_url(self.spec.ref) if "://" in self.spec.ref else self.spec.ref
        return f"{self.name} ({self.spec.type} {ref or '(empty)'} at {where})"


def mounts_of(workspace: MountSpec | None, inputs: list[MountSpec]) -> list[Mount]:
    out = [Mount("workspace", workspace)] if workspace is not None else []
    out.extend(Mount(f"inputs[{i}]", m) for i, m in enumerate(inputs))
    return out


async def prepare_mounts(
    workdir: Path,
    mounts: list[Mount],
    *,
    scratch: Path,
    note: Note | None = None,
    host_paths: HostPaths = NO_HOST_PATHS,
    server: str = "",
) -> None:
    """Prepare ``mounts`` in order inside ``workdir`` (created if missing). ``scratch`` is a
    directory for downloads on the same filesystem (created and removed here). Node paths
    are copied only where ``host_paths`` allows. ``server``: the http(s) origin of the
    agent's server, for refs on it (``SERVER_REF``)."""
    root = await trio.to_thread.run_sync(_make_dirs, workdir, scratch)
    try:
        read_only: list[tuple[Path, bool]] = []
        for mount in mounts:
            try:
                target = await trio.to_thread.run_sync(_target, workdir, mount.spec.path)
                await _prepare_one(mount, target, scratch, note, host_paths, server)
            except (Refused, HostPathRefused, TransferError, OSError) as exc:
                raise MountError(f"{mount.describe()}: {_reason(exc)}") from None
            if mount.spec.mode == "ro":
                read_only.append((target, target == root))
        for target, is_root in reversed(read_only):
            await trio.to_thread.run_sync(make_read_only, target, not is_root)
    finally:
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(shutil.rmtree, scratch, True)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        name = f" {exc.filename}" if exc.filename else ""
        return f"{exc.strerror}{name}"
    return str(exc)


def _make_dirs(workdir: Path, scratch: Path) -> Path:
    workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    scratch.mkdir(mode=0o700, parents=True, exist_ok=True)
    return workdir.resolve()


def _target(workdir: Path, rel: str) -> Path:
    """The absolute path of a mount inside the workdir, refusing anything that would leave
    it (``..``, absolute paths, or symlinks already there that point out)."""
    root = workdir.resolve()
    if rel in ("", "."):
        return root
    if rel.startswith("/") or "\\" in rel or "\0" in rel or ".." in rel.split("/"):
        raise Refused(f"mount path {rel!r} must stay inside the working directory")
    target = root.joinpath(*[p for p in rel.split("/") if p not in ("", ".")])
    real = Path(os.path.realpath(target))
    if real != root and root not in real.parents:
        raise Refused(f"mount path {rel!r} leads outside the working directory (symlink)")
    return target


async def _prepare_one(
    mount: Mount,
    target: Path,
    scratch: Path,
    note: Note | None,
    host_paths: HostPaths,
    server: str,
) -> None:
    spec = mount.spec
    ref = spec.ref
    if spec.type == "inline":
        if ref:  # an inline mount without code (the Mount defaults) puts nothing there
            await trio.to_thread.run_sync(_write_text, target, ref)
    elif spec.type == "git":
        if ref.startswith(SERVER_REF):  # a connection's repository, through the server
            ref = server + ref.removeprefix(SERVER_REF)
        commit = await clone_git(ref, target, host_paths, auth=spec.auth)
        if note is not None:
            url, _, rev = ref.partition("#")
            await note(
                f"{mount.name}: git {redact_url(url)}"
                + (f" at {rev}" if rev else " (default branch)")
                + f" -> commit {commit}"
            )
    elif spec.type == "archive" or (spec.type == "dir" and _is_http(ref)):
        archive = await _fetch(ref, scratch)
        count = await _in_thread(unpack_archive, archive, target)
        if note is not None:
            await note(f"{mount.name}: unpacked {count} entries from {redact_url(ref)}")
    elif spec.type == "file":
        if _is_http(ref):
            fetched = await _fetch(ref, scratch)
            await trio.to_thread.run_sync(_place_file, fetched, target)
        else:
            await trio.to_thread.run_sync(_copy_file, _node_path(ref), target, host_paths)
    elif spec.type == "dir":
        if ref:
            await trio.to_thread.run_sync(_copy_dir, _node_path(ref), target, host_paths)
        else:
            await trio.to_thread.run_sync(_make_empty_dir, target)
    else:  # pragma: no cover - the protocol model refuses other types
        raise Refused(f"unknown mount type {spec.type!r}")


def _is_http(ref: str) -> bool:
    return ref.startswith(("http://", "https://"))


def _node_path(ref: str) -> Path:
    if ref[:7].lower() == "file://":
        parts = urlsplit(ref)
        if parts.netloc not in ("", "localhost"):
            raise Refused("a file:// ref must name a path on this node")
        ref = unquote(parts.path)
    if not ref.startswith("/"):
        raise Refused("a path on the node must be absolute")
    return Path(ref)


async def _fetch(url: str, scratch: Path) -> Path:
    dest = scratch / f"download-{time.monotonic_ns()}"
    await download(url, dest)
    return dest


async def _in_thread(fn: Callable[..., int], *args: object) -> int:
    """Run a blocking unpack in a thread; a cancel abandons it and tells it to stop."""
    stop = threading.Event()
    try:
        return await trio.to_thread.run_sync(lambda: fn(*args, stop=stop), abandon_on_cancel=True)
    finally:
        stop.set()


# --------------------------------------------------------------------------- simple types


def _write_text(target: Path, text: str) -> None:
    if target.is_dir():
        raise Refused("the path is a directory")
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def _place_file(fetched: Path, target: Path) -> None:
    if target.is_dir():
        raise Refused("the path is a directory")
    target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
    os.chmod(fetched, 0o644)
    os.replace(fetched, target)


# Node paths are opened once, after the host-path check, and checked again on what was
# opened; a directory is then read through its descriptors (no path is looked up twice),
# so a path changed meanwhile (a symlink swapped in) cannot make the agent copy another
# file than the one allowed.
_OPEN_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_DIR = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC


def _open_node_path(path: Path, host_paths: HostPaths, flags: int) -> int:
    real = host_paths.check(path)
    try:
        fd = os.open(real, flags)
    except FileNotFoundError:
        fd = -1
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise
        fd = -1
    if fd < 0:
        kind = "directory" if flags & os.O_DIRECTORY else "file"
        raise Refused(f"{path} is not a {kind} on this node")
    try:
        host_paths.check_open(fd, path)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _copy_file(source: Path, target: Path, host_paths: HostPaths = NO_HOST_PATHS) -> None:
    fd = _open_node_path(source, host_paths, _OPEN_FILE)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Refused(f"{source} is not a file on this node")
        if target.is_dir():
            raise Refused("the path is a directory")
        target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
        _copy_fd(fd, target)
    finally:
        os.close(fd)


def _copy_fd(fd: int, target: Path) -> None:
    """Copy the open regular file ``fd`` to ``target`` (replaced, never written through a
    symlink), with its permission bits and modification time."""
    st = os.fstat(fd)
    if os.path.islink(target):
        os.unlink(target)
    out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        with open(fd, "rb", closefd=False) as src, open(out, "wb", closefd=False) as dst:
            shutil.copyfileobj(src, dst, _CHUNK)
        os.fchmod(out, stat.S_IMODE(st.st_mode) & 0o777)
        os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
    finally:
        os.close(out)


def _copy_dir(source: Path, target: Path, host_paths: HostPaths = NO_HOST_PATHS) -> None:
    fd = _open_node_path(source, host_paths, _OPEN_DIR)
    try:
        target.mkdir(mode=0o755, parents=True, exist_ok=True)
        _copy_dir_fd(fd, target)
    finally:
        os.close(fd)


def _copy_dir_fd(fd: int, target: Path) -> None:
    """Copy the directory open as ``fd`` into ``target``: files with their modes,
    directories, symlinks as links; other kinds (devices, FIFOs, sockets) are skipped."""
    for name in sorted(os.listdir(fd)):
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        dest = target / name
        if stat.S_ISLNK(st.st_mode):
            if os.path.lexists(dest):
                os.unlink(dest)
            os.symlink(os.readlink(name, dir_fd=fd), dest)
            continue
        flags = _OPEN_DIR if stat.S_ISDIR(st.st_mode) else _OPEN_FILE
        if not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
            continue
        child = os.open(name, flags, dir_fd=fd)
        try:
            now = os.fstat(child)
            if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
                raise Refused(f"{name!r} changed while it was copied")
            if stat.S_ISDIR(st.st_mode):
                if os.path.islink(dest):
                    os.unlink(dest)
                dest.mkdir(mode=0o700, exist_ok=True)
                _copy_dir_fd(child, dest)
                os.chmod(dest, stat.S_IMODE(st.st_mode) & 0o777)
            else:
                _copy_fd(child, dest)
        finally:
            os.close(child)


def _make_empty_dir(target: Path) -> None:
    target.mkdir(mode=0o755, parents=True, exist_ok=True)


def make_read_only(target: Path, include_top: bool = True) -> None:
    """Remove every write bit from ``target`` and everything under it (symlinks untouched).
    ``include_top=False`` leaves the top directory itself writable."""

    def strip(path: str) -> None:
        st = os.lstat(path)
        if not stat.S_ISLNK(st.st_mode):
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o222)

    if target.is_symlink() or not target.is_dir():
        strip(str(target))
        return
    for dirpath, dirnames, filenames in os.walk(target, topdown=False):
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            strip(os.path.join(dirpath, name))
        if dirpath != str(target) or include_top:
            strip(dirpath)


# --------------------------------------------------------------------------- git


def _git_env(auth: str | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    if auth is not None:
        # a connection's credential (docs/git.md): an extra header for this git process
        # only, through its environment: never on a command line, never in .git/config
        env.update(
            GIT_CONFIG_COUNT="1",
            GIT_CONFIG_KEY_0="http.extraHeader",
            GIT_CONFIG_VALUE_0=f"Authorization: {auth}",
        )
    env.update(
        {
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "true",
            "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
            "GIT_HTTP_LOW_SPEED_LIMIT": "1000",
            "GIT_HTTP_LOW_SPEED_TIME": str(GIT_LOW_SPEED_SEC),
            "LC_ALL": "C",
            # no ext:: (runs a command), fd:: or other remote helpers; local paths only
            # after the host-path check (``clone_git``)
            "GIT_ALLOW_PROTOCOL": "http:https:git:ssh:file",
        }
    )
    return env


async def _git(*args: str, cwd: Path | None = None, auth: str | None = None) -> str:
    argv = ["git", "-c", "advice.detachedHead=false", *args]
    try:
        result = await trio.run_process(
            argv,
            cwd=cwd,
            env=_git_env(auth),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            stdin=b"",
        )
    except FileNotFoundError:
        raise Refused("git is not installed on this node") from None
    if result.returncode != 0:
        err = result.stderr.decode("utf-8", errors="replace").strip().splitlines()
        last = next((line for line in reversed(err) if line.strip()), "")
        raise Refused(f"git {args[0]} failed: {last[:300] or f'exit {result.returncode}'}")
    return result.stdout.decode("utf-8", errors="replace").strip()


def _local_repository(url: str) -> Path | None:
    """The node path a git URL names (``file://``, a path, or git's ``host:path`` form
    without a host part), or None for a remote repository."""
    if url[:7].lower() == "file://":
        return _node_path(url)
    if "://" in url or "::" in url:
        return None  # a remote URL, or a remote helper (refused by GIT_ALLOW_PROTOCOL)
    if url.startswith(("/", ".", "~")) or ":" not in url.split("/", 1)[0]:
        return Path(url) if url.startswith("/") else Path(os.path.abspath(url))
    return None  # user@host:path (ssh)


async def clone_git(
    ref: str, target: Path, host_paths: HostPaths = NO_HOST_PATHS, *, auth: str | None = None
) -> str:
    """Fetch ``<url>[#<rev>]`` into ``target`` and check it out detached; return the commit.
    A repository on the node itself is fetched only where ``host_paths`` allows.

    A shallow fetch of the revision is tried first (branches, tags, and commits the server
    lets us ask for); if the server refuses, everything is fetched and the revision resolved
    locally (a commit reachable from any branch or tag)."""
    url, _, rev = ref.partition("#")
    if not url or url.startswith("-") or rev.startswith("-"):
        raise Refused("a git ref is '<repository url>[#<branch, tag or commit>]'")
    local = _local_repository(url)
    if local is not None:
        url = str(host_paths.check(local))
    await trio.to_thread.run_sync(lambda: target.mkdir(mode=0o755, parents=True, exist_ok=True))
    await _git("init", "-q", str(target))
    await _git("remote", "add", "origin", url, cwd=target)
    try:
        await _git("fetch", "-q", "--depth", "1", "origin", rev or "HEAD", cwd=target, auth=auth)
        commit = await _git("rev-parse", "--verify", "FETCH_HEAD^{commit}", cwd=target)
    except Refused:
        if not rev:
            raise
        await _git(
            "fetch",
            "-q",
            "--tags",
            "origin",
            "+refs/heads/*:refs/remotes/origin/*",
            cwd=target,
            auth=auth,
        )
        commit = ""
        for candidate in (f"{rev}^{{commit}}", f"origin/{rev}^{{commit}}"):
            with contextlib.suppress(Refused):
                commit = await _git("rev-parse", "--verify", "-q", candidate, cwd=target)
                break
        if not commit:
            raise Refused(f"no branch, tag or commit {rev!r} in the repository") from None
    await _git("checkout", "-q", "--detach", commit, cwd=target)
    return commit
