"""Unpacking a pulled layout into a root filesystem with umoci (``umoci raw unpack``: as
root it keeps the image's owners, modes and device nodes; umoci checks each blob against
its digest as it reads it), and the size of what is left on disk."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import trio

from runplane.agent.images.errors import CacheFull, ImageError
from runplane.agent.images.layout import LAYOUT_TAG

UMOCI = "umoci"


async def unpack(layout: Path, rootfs: Path) -> None:
    """Unpack the layout's image into ``rootfs`` (which must not exist). A cancel kills
    umoci; a full disk is :class:`CacheFull`."""
    rootless = [] if os.geteuid() == 0 else ["--rootless"]
    done = await trio.run_process(
        [UMOCI, "raw", "unpack", *rootless, "--image", f"{layout}:{LAYOUT_TAG}", str(rootfs)],
        stdin=subprocess.DEVNULL,
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    if done.returncode == 0:
        return
    err = done.stderr.decode(errors="replace").strip()
    last = err.splitlines()[-1] if err else f"exit status {done.returncode}"
    if "no space left on device" in err.lower() or _nearly_full(rootfs.parent):
        # umoci does not always say so: on a full disk it may die in its gzip reader
        # with a Go panic, so the disk itself is asked too
        raise CacheFull(f"image cache full: no space left on the disk while unpacking ({last})")
    raise ImageError(f"unpacking the image failed: {last[:500]}")


#: Free bytes under which a failed unpack is taken for a full disk.
NEARLY_FULL_BYTES = 1 << 20


def _nearly_full(path: Path) -> bool:
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < NEARLY_FULL_BYTES


def tree_size(root: Path) -> int:
    """Bytes a directory tree takes on disk (``du``: allocated blocks, a hard-linked file
    once, symlinks not followed)."""
    seen: set[tuple[int, int]] = set()
    total = os.lstat(root).st_blocks * 512
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if key in seen:
                    continue
                seen.add(key)
            total += st.st_blocks * 512
    return total
