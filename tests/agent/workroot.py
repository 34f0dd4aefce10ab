"""Job work roots for tests: as root, an agent runs jobs as its job user, who cannot reach
pytest's ``tmp_path`` (under ``/tmp/pytest-of-root``, mode 0700). These live under the
system temp dir instead (0711) and are removed after each test (``conftest.py``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

_MADE: list[Path] = []


def reachable_work_dir() -> Path | None:
    """A ``work_dir`` for an agent the job user can reach; None (the agent's default,
    ``<data dir>/jobs``) when the tests do not run as root."""
    if os.geteuid() != 0:
        return None
    top = Path(tempfile.mkdtemp(prefix="runplane-test-work-"))
    top.chmod(0o711)
    _MADE.append(top)
    return top / "jobs"


def remove_work_dirs() -> None:
    while _MADE:
        shutil.rmtree(_MADE.pop(), ignore_errors=True)
