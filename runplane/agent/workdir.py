"""A job's working directory as the executor prepares it: created, its inline files
written, handed to the job's user (``docs/executor.md``, What runs, step 2)."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Mapping
from pathlib import Path

from runplane.agent.isolation import JobUser, hand_over


class WorkdirError(Exception):
    pass


def prepare_workdir(
    workdir: Path, inline_files: Mapping[str, str], user: JobUser | None = None
) -> None:
    """Create the workdir, write the inline files, and hand it all to ``user`` (blocking;
    run in a thread). With a user the workdir must still be the agent's alone: it is
    written and walked as the agent, and given away last."""
    try:
        workdir.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkdirError(f"cannot create workdir {workdir}: {exc.strerror or exc}") from None
    if user is not None:
        st = os.lstat(workdir)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise WorkdirError(
                f"workdir {workdir} must be a directory of the agent's user before the job's "
                "user gets it"
            )
        os.chmod(workdir, 0o700)
    root = workdir.resolve()
    for rel, content in inline_files.items():
        path = Path(rel)
        if not rel or path.is_absolute() or ".." in path.parts or not path.parts:
            raise WorkdirError(f"inline file path must be relative inside the workdir: {rel!r}")
        target = root / path
        if not target.parent.resolve().is_relative_to(root):
            raise WorkdirError(f"inline file path leaves the workdir: {rel!r}")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            if target.is_symlink():
                target.unlink()
            target.write_text(content, encoding="utf-8")
            target.chmod(0o755 if content.startswith("#!") else 0o644)
        except OSError as exc:
            raise WorkdirError(f"cannot write inline file {rel!r}: {exc.strerror or exc}") from None
    if user is not None:
        try:
            hand_over(workdir, user)
        except OSError as exc:
            raise WorkdirError(
                f"cannot give workdir {workdir} to user {user.name}: {exc.strerror or exc}"
            ) from None


def own_dir(path: Path, user: JobUser) -> None:
    """A fresh empty directory at ``path`` (0700) owned by ``user``."""
    if os.path.lexists(path):
        shutil.rmtree(path)
    path.mkdir(mode=0o700)
    os.chown(path, user.uid, user.gid)
