"""A uid and gid of its own for every running attempt (an agent running as root).

An agent running as root runs each attempt as a uid taken from a range it owns
(``runplane agent --uid-range FIRST-LAST``, :data:`DEFAULT_UID_RANGE` by default), numeric
only: no passwd entry is needed (``setpriv`` and ``subprocess`` take numbers). The gid is
the same number. So one job cannot read another's ``/proc/<pid>/environ`` or ``fd``, signal
its processes, or enter its working directory (0700, its own): the kernel's checks between
uids do it, as systemd's ``DynamicUser=`` and Nomad's exec driver rely on.

**Who holds a uid.** Each uid in use is held with an ``flock`` on ``<lock dir>/<uid>``
(``/run/runplane/uids`` by default), taken when an attempt starts and released when it
has ended: agents on one host (several data dirs) share a range safely, and a crashed
agent's locks go with its process.

**Taking** (:meth:`UidPool.take`): the first uid whose lock is free, counting on from the
last one taken (a freed uid is reused last), is swept first (``leftovers.py``) when its
lock file says a holder never gave it back: whatever a crashed agent's job left under it
(processes, files in the shared temp dirs, System V IPC) is killed, handed back to root
or removed before the new attempt gets it.

**Giving back** (:meth:`UidPool.release`): every process of the uid is SIGKILLed and found
gone (the job's cgroup, where there is one, went first; the uid finds what left it, or
everything on a node without cgroups), then its files in the shared temp dirs are handed
back to root and its IPC objects removed, then the attempt's own directories (workdir,
``.deps``, ``.streams``) are handed back to root (top 0700), and only then is the lock
released. A uid whose processes do not die (stuck in the kernel) stays held and is tried
again at the next take.

**At start** (:meth:`UidPool.sweep_stale`) the agent, which resumes no running attempt
(a restarted agent starts with none), sweeps every uid of its range that no live agent
holds: what its previous run's jobs left is gone before any job starts.
"""

from __future__ import annotations

import fcntl
import grp
import logging
import os
import pwd
import random
import stat
import threading
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runplane.agent.isolation import JobUser, RunAsError
from runplane.agent.leftovers import (
    SHARED_DIRS,
    StillAlive,
    hand_back_shared,
    ipc_owners,
    kill_uid,
    kill_uids,
    processes_of,
    remove_ipc,
    take_back,
    take_back_stale,
)

log = logging.getLogger("runplane.agent")

#: The uids of a root agent's attempts unless ``--uid-range`` says: well above system
#: (< 1000) and login users (< 60000), systemd's dynamic users (61184-65519), the usual
#: subordinate ranges of rootless containers (from 100000) and systemd-nspawn's container
#: range (524288-1878982655); below 2^31, which some programs treat as negative.
DEFAULT_UID_RANGE = (1_950_000_000, 1_950_065_535)
#: Where the per-uid locks live (a tmpfs: they mean nothing after a reboot).
DEFAULT_LOCK_DIR = Path("/run/runplane/uids")


@dataclass(frozen=True, slots=True)
class UidRange:
    """An inclusive range of uids (``FIRST-LAST``)."""

    first: int
    last: int

    def __post_init__(self) -> None:
        if not 1000 <= self.first <= self.last < 2**31 - 1:
            raise ValueError(
                f"uid range {self.first}-{self.last}: give FIRST-LAST with "
                f"1000 <= FIRST <= LAST < {2**31 - 1}, e.g. "
                f"{DEFAULT_UID_RANGE[0]}-{DEFAULT_UID_RANGE[1]}"
            )

    @classmethod
    def parse(cls, text: str) -> UidRange:
        first, sep, last = text.strip().partition("-")
        try:
            if not sep:
                raise ValueError
            return cls(int(first), int(last))
        except ValueError as exc:
            if str(exc).startswith("uid range"):
                raise
            raise ValueError(
                f"--uid-range {text!r}: give FIRST-LAST, two numbers, e.g. "
                f"{DEFAULT_UID_RANGE[0]}-{DEFAULT_UID_RANGE[1]}"
            ) from None

    @classmethod
    def default(cls) -> UidRange:
        return cls(*DEFAULT_UID_RANGE)

    def __contains__(self, uid: object) -> bool:
        return isinstance(uid, int) and self.first <= uid <= self.last

    def __len__(self) -> int:
        return self.last - self.first + 1

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


@dataclass(slots=True)
class Released:
    """What giving a uid back found and did."""

    uid: int
    killed: int = 0
    handed_back: int = 0
    removed: int = 0
    #: False: a process of the uid did not die; the uid stays held
    freed: bool = True


@dataclass(slots=True)
class Swept:
    """What the start-up sweep found of earlier runs."""

    killed: int = 0
    #: files and directories handed back to root (shared dirs and the work root)
    handed_back: int = 0
    #: IPC objects removed
    removed: int = 0
    uids: list[int] = field(default_factory=list)


def attempt_user(uid: int) -> JobUser:
    return JobUser(f"uid {uid}", uid, uid)


class UidPool:
    """The uids of one agent's attempts (see the module doc). :meth:`take`,
    :meth:`release` and :meth:`sweep_stale` block: run them in a worker thread."""

    def __init__(
        self,
        uids: UidRange,
        lock_dir: Path = DEFAULT_LOCK_DIR,
        shared_dirs: tuple[Path, ...] = SHARED_DIRS,
    ) -> None:
        self.uids = uids
        self.lock_dir = lock_dir
        self.shared_dirs = shared_dirs
        self._mutex = threading.Lock()
        self._held: dict[Hashable, tuple[int, int]] = {}  # holder -> (uid, lock fd)
        self._stuck: dict[int, int] = {}  # uid -> lock fd: processes that would not die
        self._next = uids.first + random.randrange(len(uids))

    # -- start

    def check(self) -> None:
        """Refuse a range holding a user or group of this node (its files and processes
        would be a job's); create the lock dir (blocking)."""
        for entry in pwd.getpwall():
            if entry.pw_uid in self.uids:
                raise RunAsError(
                    f"--uid-range {self.uids}: uid {entry.pw_uid} is the user {entry.pw_name} "
                    "of this node; give a range no user or group of the node is in"
                )
        for group in grp.getgrall():
            if group.gr_gid in self.uids:
                raise RunAsError(
                    f"--uid-range {self.uids}: gid {group.gr_gid} is the group "
                    f"{group.gr_name} of this node; give a range no user or group is in"
                )
        for parent in reversed(self.lock_dir.parents):
            if not parent.exists():
                parent.mkdir(mode=0o755)
        self.lock_dir.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(self.lock_dir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise RunAsError(
                f"uid lock dir {self.lock_dir} must be a directory of the agent's user"
            )
        os.chmod(self.lock_dir, 0o700)

    @property
    def representative(self) -> JobUser:
        """A user of the range, for checks every attempt's user passes alike (what
        ``others`` may do: no uid of the range owns anything of the node)."""
        return attempt_user(self.uids.first)

    def sweep_stale(self, work_root: Path | None = None) -> Swept:
        """Kill and hand back what uids of the range that no live agent holds left, and
        hand back to the agent every attempt directory of ``work_root`` that a uid of the
        range still owns (this agent resumes no attempt)."""
        swept = Swept()
        found = sorted(
            set(processes_of(self.uids.__contains__)) | ipc_owners(self.uids.__contains__)
        )
        for uid in found:
            fd = self._lock(uid)
            if fd is None:
                continue  # another agent's running attempt
            try:
                swept.killed += kill_uid(uid)
                swept.uids.append(uid)
            finally:
                os.close(fd)
        free = _Unheld(self)
        swept.handed_back += hand_back_shared(free, self.shared_dirs)
        swept.removed += remove_ipc(free)
        if work_root is not None:
            swept.handed_back += take_back_stale(work_root, self.uids.__contains__)
        return swept

    # -- attempts

    def take_clean(self, holder: Hashable) -> JobUser | None:
        """The next uid for ``holder`` at once when it needs no sweep (a lock, a read and a
        write of its lock file: cheap enough for the event loop); None when it does, or
        is held (then :meth:`take`, in a worker thread)."""
        with self._mutex:
            held = self._held.get(holder)
            if held is not None:
                return attempt_user(held[0])
            uid = self._next
        fd = self._lock(uid)
        if fd is None:
            return None
        if _left_held(fd):
            os.close(fd)
            return None
        _mark(fd, f"held by pid {os.getpid()}\n".encode())
        with self._mutex:
            self._held[holder] = (uid, fd)
            self._next = uid + 1 if uid < self.uids.last else self.uids.first
        return attempt_user(uid)

    def take(self, holder: Hashable) -> JobUser:
        """A free uid for ``holder``, swept clean first (RunAsError when all are held)."""
        self._retry_stuck()
        with self._mutex:
            held = self._held.get(holder)
            if held is not None:
                return attempt_user(held[0])
            start = self._next
        size = len(self.uids)
        for step in range(size):
            uid = self.uids.first + (start - self.uids.first + step) % size
            fd = self._lock(uid)
            if fd is None:
                continue
            try:
                if _left_held(fd):
                    _sweep(uid, self.shared_dirs)  # a crashed agent's leftovers, gone first
            except StillAlive:
                with self._mutex:
                    self._stuck[uid] = fd
                continue
            _mark(fd, f"held by pid {os.getpid()}\n".encode())
            with self._mutex:
                self._held[holder] = (uid, fd)
                self._next = uid + 1 if uid < self.uids.last else self.uids.first
            return attempt_user(uid)
        raise RunAsError(f"every uid of the range {self.uids} is in use on this node")

    def release(self, holder: Hashable, own_dirs: Iterable[Path] = ()) -> Released | None:
        """Give ``holder``'s uid back: its processes killed, its shared files handed back
        and IPC removed, ``own_dirs`` handed back to the agent, then the lock released.
        None when ``holder`` holds none."""
        result = self.release_many([(holder, own_dirs)])[0]
        if isinstance(result, Exception):
            raise result
        return result

    def release_many(
        self, items: Sequence[tuple[Hashable, Iterable[Path]]]
    ) -> list[Released | Exception | None]:
        """:meth:`release` of each ``(holder, own_dirs)``, all swept together: one scan of
        ``/proc`` a kill round, one walk of the shared dirs and one read of the IPC tables
        for every uid of the batch (``leftovers.py``), each uid's own steps in the same
        order as alone. What one holder's release raised is its result (the others go on)."""
        with self._mutex:
            held = [self._held.get(holder) for holder, _ in items]
        swept = _sweep_many({h[0] for h in held if h is not None}, self.shared_dirs)
        out: list[Released | Exception | None] = []
        for (holder, own_dirs), found in zip(items, held, strict=True):
            if found is None:
                out.append(None)
            elif found[0] in swept.stuck:
                out.append(self._stuck_now(holder, found))
            else:
                uid = found[0]
                counts = (swept.killed.get(uid, 0), swept.handed.get(uid, 0))
                result = Released(uid, *counts, swept.removed.get(uid, 0))
                out.append(self._give_back(holder, found, own_dirs, result))
        return out

    def _stuck_now(self, holder: Hashable, held: tuple[int, int]) -> Released:
        """A uid whose processes did not die: it stays held (the next take retries it)."""
        uid, fd = held
        with self._mutex:
            del self._held[holder]
            self._stuck[uid] = fd
        log.error(
            "job uid not freed: its processes did not die",
            extra={"uid": uid, "holder": str(holder)},
        )
        return Released(uid, freed=False)

    def _give_back(
        self, holder: Hashable, held: tuple[int, int], own_dirs: Iterable[Path], result: Released
    ) -> Released | Exception:
        """The uid's own directories handed back, then its lock marked clean and released."""
        try:
            for path in own_dirs:
                take_back(path)
        except Exception as exc:  # the uid stays held, as when release raised alone
            return exc
        fd = held[1]
        _mark(fd, _CLEAN)  # the next take needs no sweep
        with self._mutex:
            del self._held[holder]  # held until now: never given out half swept
        os.close(fd)
        return result

    def in_use(self) -> dict[Hashable, int]:
        """Holder -> uid of every uid this pool holds now."""
        with self._mutex:
            return {holder: uid for holder, (uid, _) in self._held.items()}

    def uid_of(self, holder: Hashable) -> int | None:
        with self._mutex:
            held = self._held.get(holder)
        return held[0] if held is not None else None

    def close(self) -> None:
        """Release every lock (the agent stops; what is left is swept at the next start)."""
        with self._mutex:
            fds = [fd for _, fd in self._held.values()] + list(self._stuck.values())
            self._held.clear()
            self._stuck.clear()
        for fd in fds:
            os.close(fd)

    def _retry_stuck(self) -> None:
        with self._mutex:
            stuck = dict(self._stuck)
        for uid, fd in stuck.items():
            try:
                _sweep(uid, self.shared_dirs, timeout=0.2)
            except StillAlive:
                continue
            with self._mutex:
                self._stuck.pop(uid, None)
            os.close(fd)
            log.info("job uid freed at last", extra={"uid": uid})

    def _lock(self, uid: int) -> int | None:
        """The uid's lock, taken (its fd), or None when another holds it."""
        with self._mutex:
            if any(u == uid for u, _ in self._held.values()) or uid in self._stuck:
                return None
        fd = os.open(self.lock_dir / str(uid), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def _is_held_elsewhere(self, uid: int) -> bool:
        """Whether a live agent (this one included) holds ``uid`` now."""
        fd = self._lock(uid)
        if fd is None:
            return True
        os.close(fd)
        return False


class _Unheld:
    """Selects the uids of a pool's range that no live agent holds (asked once each)."""

    def __init__(self, pool: UidPool) -> None:
        self.pool = pool
        self.known: dict[int, bool] = {}

    def __call__(self, uid: int) -> bool:
        if uid not in self.pool.uids:
            return False
        if uid not in self.known:
            self.known[uid] = not self.pool._is_held_elsewhere(uid)
        return self.known[uid]


def _sweep(
    uid: int, shared_dirs: Iterable[Path], timeout: float | None = None
) -> tuple[int, int, int]:
    """Everything of ``uid`` gone: (processes killed, shared files handed back, IPC objects
    removed). Raises StillAlive (nothing else done) when a process would not die."""
    swept = _sweep_many({uid}, shared_dirs, timeout)
    if swept.stuck:
        raise StillAlive(uid)
    return swept.killed.get(uid, 0), swept.handed.get(uid, 0), swept.removed.get(uid, 0)


@dataclass(slots=True)
class _SweptMany:
    """What :func:`_sweep_many` did, by uid; ``stuck``: the uids left alone."""

    killed: dict[int, int]
    stuck: set[int]
    handed: dict[int, int] = field(default_factory=dict)
    removed: dict[int, int] = field(default_factory=dict)


def _sweep_many(
    uids: set[int], shared_dirs: Iterable[Path], timeout: float | None = None
) -> _SweptMany:
    """Everything of each of ``uids`` gone, in this order: its processes killed, its files
    in the shared dirs handed back, its IPC objects removed; one scan of each for all of
    them. A uid whose processes would not die is ``stuck``: nothing else is done to it."""
    if not uids:
        return _SweptMany({}, set())
    killed, stuck = kill_uids(uids) if timeout is None else kill_uids(uids, timeout)
    swept = _SweptMany(killed, stuck)
    if uids - stuck:
        owned = (uids - stuck).__contains__
        hand_back_shared(owned, shared_dirs, swept.handed)
        remove_ipc(owned, swept.removed)
    return swept


#: What a uid's lock file says once it was given back swept (a take then sweeps nothing),
#: and while it is held (``held by pid N``: left so, a killed agent held it, and the next
#: take sweeps first). A new, empty file: no agent ever held the uid since the node booted
#: (``/run`` is a tmpfs) and the start-up sweep handed back what earlier boots left.
_CLEAN = b"clean\n"
_HELD = b"held"


def _left_held(fd: int) -> bool:
    """Whether the uid's last holder did not give it back swept."""
    return os.pread(fd, len(_HELD), 0) == _HELD


def _mark(fd: int, text: bytes) -> None:
    os.ftruncate(fd, 0)
    os.pwrite(fd, text, 0)
