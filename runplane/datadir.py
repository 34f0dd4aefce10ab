"""One data dir, one server: ``runplane serve`` locks ``<data dir>/server.lock`` before it
opens anything there (docs/operations.md "One data dir, one server").

The lock is ``flock``: the kernel drops it when the process ends, however it ends
(``kill -9`` included), so a stale lock file never blocks a start. The file holds the pid
of the holder, for the message a second server prints. HA replicas share a data dir by
design and take no such lock (their single leader is the database lease's business)."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

LOCK_FILE = "server.lock"


class DataDirInUse(Exception):
    """Another live process holds the data dir; ``pid`` as it wrote it (None if unread)."""

    def __init__(self, data_dir: Path, pid: int | None) -> None:
        held = f"pid {pid}" if pid is not None else "pid unknown"
        super().__init__(
            f"data dir {data_dir} is in use by another server ({held}); stop it, or give "
            "this one its own with RUNPLANE_DATA_DIR"
        )
        self.pid = pid


def lock_data_dir(data_dir: Path) -> int:
    """Take the data dir for this process: the lock's fd, kept open for the process's
    life (never closed: the lock ends with the process). Creates the data dir if missing,
    nothing else. :class:`DataDirInUse` when another process holds it."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(data_dir / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = _pid_in(fd)
        os.close(fd)
        raise DataDirInUse(data_dir, pid) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def _pid_in(fd: int) -> int | None:
    try:
        return int(os.pread(fd, 32, 0).decode().strip())
    except (OSError, ValueError):
        return None
