"""What a job's uid leaves behind on the node, and how the agent gets rid of it before the
uid is used again (``uids.py``): its processes (killed), its files in the directories
every uid may write to (handed back to root), its System V IPC objects (removed) and its
own directories (handed back to root, 0700). See ``docs/executor.md`` (A uid per job).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from runplane.agent.isolation import JobUser, hand_over

log = logging.getLogger("runplane.agent")

#: Directories every uid may write to: a freed uid's files in them (found through their
#: world-writable subdirectories only: elsewhere the uid could not create anything) are
#: handed back to root, so the next job of the uid cannot read or change them.
SHARED_DIRS = (Path("/tmp"), Path("/var/tmp"), Path("/dev/shm"), Path("/dev/mqueue"))
#: How long a kill waits for the uid's processes to be gone after SIGKILL.
KILL_TIMEOUT_SEC = 5.0
_SHARED_DEPTH = 8
#: ``/proc/sysvipc`` tables: (file, id column, ``ipcrm`` option).
_IPC_TABLES = (("shm", "shmid", "-m"), ("msg", "msqid", "-q"), ("sem", "semid", "-s"))

#: Which uids to act on.
Owned = Callable[[int], bool]


class StillAlive(Exception):
    """A process of the uid did not die in time (stuck in the kernel)."""


# --------------------------------------------------------------------------- processes


def _status_uids(pid: str) -> tuple[tuple[int, ...], bool] | None:
    """The real, effective and saved uids of a process, and whether it is a zombie
    (``State:`` and ``Uid:`` of ``/proc/<pid>/status``; the agent reads it for every
    process at the end of every job, so it is read as bytes, not split into lines)."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            data = f.read()
    except OSError:
        return None
    state = data.find(b"\nState:\t")
    at = data.find(b"\nUid:\t")
    if at < 0:
        return None
    end = data.find(b"\n", at + 6)
    uids = tuple(int(v) for v in data[at + 6 : end].split()[:3])
    zombie = state >= 0 and data[state + 8 : state + 9] in (b"Z", b"X")
    return uids, zombie


def processes_of(owned: Owned) -> dict[int, list[int]]:
    """uid -> pids of the live (not zombie) processes whose real, effective or saved uid
    is an ``owned`` one."""
    out: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        found = _status_uids(name)
        if found is None or found[1]:
            continue
        for uid in found[0]:
            if owned(uid):
                out.setdefault(uid, []).append(int(name))
                break
    return out


def kill_uid(uid: int, timeout: float = KILL_TIMEOUT_SEC) -> int:
    """SIGKILL every process of ``uid`` until none is left; how many were killed.
    Raises :class:`StillAlive` when some are still there after ``timeout``."""
    killed, alive = kill_uids({uid}, timeout)
    if alive:
        raise StillAlive(uid)
    return killed.get(uid, 0)


def kill_uids(uids: set[int], timeout: float = KILL_TIMEOUT_SEC) -> tuple[dict[int, int], set[int]]:
    """SIGKILL every process of each of ``uids`` until none is left, one ``/proc`` scan a
    round for all of them: (uid -> how many were killed, the uids with a process still
    there after ``timeout``)."""
    killed: dict[int, set[int]] = {}
    deadline = time.monotonic() + timeout
    while True:
        found = processes_of(uids.__contains__)
        counts = {uid: len(pids) for uid, pids in killed.items()}
        if not found:
            return counts, set()
        if time.monotonic() > deadline:
            return counts, set(found)
        for uid, pids in found.items():
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
                    killed.setdefault(uid, set()).add(pid)
        time.sleep(0.005)


# --------------------------------------------------------------------------- files


def hand_back_shared(
    owned: Owned, dirs: Iterable[Path] = SHARED_DIRS, counts: dict[int, int] | None = None
) -> int:
    """Hand back to root what ``owned`` uids own in the shared dirs; how many entries
    (``counts``: also by uid)."""
    tally = counts if counts is not None else {}
    return sum(_hand_back_owned(str(top), owned, _SHARED_DEPTH, tally) for top in dirs)


def _hand_back_owned(directory: str, owned: Owned, depth: int, counts: dict[int, int]) -> int:
    count = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if owned(st.st_uid) or owned(st.st_gid):
            owner = st.st_uid if owned(st.st_uid) else st.st_gid
            try:
                _to_root(entry.path, st)
                count += 1
                counts[owner] = counts.get(owner, 0) + 1
            except OSError as exc:
                log.warning(
                    "cannot hand back a job uid's file",
                    extra={"path": entry.path, "uid": st.st_uid, "error": str(exc)},
                )
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_IWOTH and depth > 0:
            count += _hand_back_owned(entry.path, owned, depth - 1, counts)
    return count


def _to_root(path: str, st: os.stat_result) -> None:
    """Make one entry the agent's: a regular file through a descriptor opened without
    following a link (its set-id bits dropped), anything else with ``lchown``."""
    uid, gid = os.geteuid(), os.getegid()
    if not stat.S_ISREG(st.st_mode):
        os.lchown(path, uid, gid)
        return
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    try:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            return  # replaced meanwhile: not the file judged
        os.fchown(fd, uid, gid)
        os.fchmod(fd, stat.S_IMODE(now.st_mode) & ~(stat.S_ISUID | stat.S_ISGID))
    finally:
        os.close(fd)


def take_back(top: Path) -> None:
    """Hand ``top`` and everything in it back to the agent's user (no symlink followed),
    ``top`` made 0700: no uid reusing the job's finds anything of it. Missing: nothing."""
    try:
        st = os.lstat(top)
    except FileNotFoundError:
        return
    hand_over(top, JobUser("the agent", os.geteuid(), os.getegid()))  # top last
    if stat.S_ISDIR(st.st_mode):
        os.chmod(top, 0o700)


def take_back_stale(work_root: Path, owned: Owned) -> int:
    """Hand back every ``<job>/<attempt>[.deps|.streams]`` entry of ``work_root`` an
    ``owned`` uid owns; how many."""
    count = 0
    try:
        jobs = [e for e in os.scandir(work_root) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return 0
    for job in jobs:
        try:
            attempts = list(os.scandir(job.path))
        except OSError:
            continue
        for entry in attempts:
            try:
                owner = entry.stat(follow_symlinks=False).st_uid
            except OSError:
                continue
            if owned(owner):
                take_back(Path(entry.path))
                count += 1
    return count


# --------------------------------------------------------------------------- System V IPC


def _ipc_rows(table: str, id_column: str) -> list[tuple[int, set[int]]]:
    """(id, {uid, cuid}) of every object of one ``/proc/sysvipc`` table."""
    try:
        lines = Path(f"/proc/sysvipc/{table}").read_text().splitlines()
    except OSError:
        return []
    if not lines:
        return []
    header = lines[0].split()
    try:
        at_id, at_uid, at_cuid = (header.index(c) for c in (id_column, "uid", "cuid"))
    except ValueError:
        return []
    rows = []
    for line in lines[1:]:
        cols = line.split()
        if len(cols) > max(at_id, at_uid, at_cuid):
            rows.append((int(cols[at_id]), {int(cols[at_uid]), int(cols[at_cuid])}))
    return rows


def ipc_owners(owned: Owned) -> set[int]:
    """The ``owned`` uids that own or created a System V IPC object."""
    return {
        uid
        for table, column, _ in _IPC_TABLES
        for _, owners in _ipc_rows(table, column)
        for uid in owners
        if owned(uid)
    }


def remove_ipc(owned: Owned, counts: dict[int, int] | None = None) -> int:
    """Remove the System V IPC objects (shared memory, queues, semaphores) the ``owned``
    uids own or created; how many (``counts``: also by uid)."""
    removed = 0
    for table, column, option in _IPC_TABLES:
        for ident, owners in _ipc_rows(table, column):
            mine = [uid for uid in owners if owned(uid)]
            if not mine:
                continue
            try:
                done = subprocess.run(["ipcrm", option, str(ident)], capture_output=True)
            except FileNotFoundError:
                log.warning("ipcrm not found: a job uid's IPC objects are left")
                return removed
            if done.returncode == 0:
                removed += 1
                if counts is not None:
                    counts[min(mine)] = counts.get(min(mine), 0) + 1
            elif b"invalid id" not in done.stderr.lower():
                log.warning(
                    "cannot remove a job uid's IPC object",
                    extra={"table": table, "id": ident, "error": done.stderr.decode()[:200]},
                )
    return removed
