"""A node's work root that filled up (docs/operations.md "Full disks"): a job that fails
while the filesystem of the agent's work root has no room left fails with a reason naming
the node and its work root (its own error kept after it), whatever failed first: the
agent creating the job's working directory or writing into it, or the job's own writes
(``No space left on device``, exit code 1). The node stays online and runs the next job
once space is back; a job that needs no room still runs."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

from runplane.agent.execspec import Finished

#: Free bytes (for unprivileged writers) under which a work root counts as full when a job
#: failed on it: a write that met ENOSPC leaves the disk about this full, rarely emptier.
FULL_BELOW_BYTES = 1024 * 1024


def is_full(root: Path) -> bool:
    """True when the filesystem holding ``root`` has (almost) no room or no inodes left;
    False when that cannot be told (the root gone, statvfs refused)."""
    path = root
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        st = os.statvfs(path)
    except OSError:
        return False
    no_inodes = st.f_files > 0 and st.f_favail == 0
    return st.f_bavail * st.f_frsize < FULL_BELOW_BYTES or no_inodes


def full_reason(node: str, root: Path) -> str:
    return (
        f"node {node}'s work root {root} is full (no space left on device): free space "
        "there; the node runs the next job once there is room"
    )


def blame_full_root(finished: Finished, node: str, root: Path) -> Finished:
    """``finished`` with the full work root as its reason when it failed on a full work
    root (blocking: run in a thread); else unchanged."""
    if finished.outcome != "failed" or not is_full(root):
        return finished
    own = f" ({finished.error})" if finished.error else ""
    return replace(finished, error=full_reason(node, root) + own)
