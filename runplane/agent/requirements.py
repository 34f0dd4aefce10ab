"""A workspace's ``requirements.txt``, pip-installed before the command runs with the
job's python into ``<workdir>.deps`` (``docs/executor.md``, What runs, step 4)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import trio

from runplane.agent.execspec import Finished
from runplane.agent.procgroup import signal_name
from runplane.agent.workdir import own_dir

if TYPE_CHECKING:
    from runplane.agent.executor import _Job

# A workdir file pip-installs before the command runs (into the workdir's ``.deps`` sibling).
REQUIREMENTS_FILE = "requirements.txt"
#: Job env key forcing the requirements.txt install on (truthy) or off (anything else).
REQUIREMENTS_KEY = "RUNPLANE_REQUIREMENTS"
#: What a stack's ``install_requirements`` config key arrives as (the python stack: true).
REQUIREMENTS_CONFIG_KEY = "RUNPLANE_CONFIG_INSTALL_REQUIREMENTS"
#: pip options of the requirements.txt install: no prompt, no progress bars, no cache
#: in HOME (the workdir), no nag about pip's own version.
PIP_OPTIONS = (
    "--disable-pip-version-check",
    "--no-input",
    "--no-cache-dir",
    "--progress-bar",
    "off",
)
_PYTHON = re.compile(r"python[0-9.]*")


def wants_requirements(env: Mapping[str, str]) -> bool:
    """Whether a job installs its workdir's requirements.txt: ``RUNPLANE_REQUIREMENTS``
    decides when set (truthy: yes); otherwise its stack's ``install_requirements`` config
    key does (the python stack sets it; a shell job in a repo with a requirements.txt does
    not run pip unasked)."""
    explicit = env.get(REQUIREMENTS_KEY)
    if explicit is not None:
        return explicit.strip().lower() in ("1", "true", "yes", "on")
    return env.get(REQUIREMENTS_CONFIG_KEY, "").strip().lower() == "true"


def _read_requirements(workdir: Path) -> str | None:
    """The text of the workdir's requirements.txt; None when there is no such file."""
    path = workdir / REQUIREMENTS_FILE
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def requirement_lines(text: str) -> int:
    """The lines of a requirements file that say something (not blank, not a comment)."""
    return sum(
        1 for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")
    )


def job_python(command: list[str], env: Mapping[str, str]) -> str | None:
    """The python a job runs: its command's program when that is a python (``python3``,
    ``.venv/bin/python``), else ``python3`` or ``python`` on the job's PATH; None without."""
    if command and _PYTHON.fullmatch(os.path.basename(command[0])):
        return command[0]
    for name in ("python3", "python"):
        if shutil.which(name, path=env.get("PATH")):
            return name
    return None


def with_deps(env: Mapping[str, str], target: Path) -> dict[str, str]:
    """``env`` with the requirements install ``target`` first on PYTHONPATH (and its
    ``bin`` first on PATH, for the scripts of the packages)."""
    out = dict(env)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(target), env.get("PYTHONPATH")) if p)
    out["PATH"] = os.pathsep.join(p for p in (str(target / "bin"), env.get("PATH")) if p)
    return out


def deps_dir_of(workdir: Path) -> Path:
    """Where the requirements of the attempt whose workdir is ``workdir`` are installed."""
    return workdir.with_name(f"{workdir.name}.deps")


async def install_requirements(job: _Job) -> Finished | None:
    """pip-install the workdir's ``requirements.txt``, if there is one, with the job's
    python into ``<workdir>.deps`` (``--target``: the node's interpreter is left alone),
    which the command then finds on ``PYTHONPATH`` (scripts on ``PATH``). A Finished
    when the install failed, timed out or was cancelled."""
    if not wants_requirements(job.env):
        return None
    text = await trio.to_thread.run_sync(_read_requirements, job.workdir)
    if text is None:
        return None
    python = job_python(job.spec.command, job.env)
    if python is None:
        await job._system(
            f"{REQUIREMENTS_FILE} not installed: no python3 or python on the job's PATH"
        )
        return None
    lines = requirement_lines(text)
    target = deps_dir_of(job.workdir)
    launch = job.spec.launch
    if job.spec.user is not None:  # the job user may not create it next to the workdir
        try:
            await trio.to_thread.run_sync(own_dir, target, job.spec.user)
        except OSError as exc:
            return await job._fail(f"cannot create {target}: {exc.strerror or exc}")
    elif launch is not None and launch.sandbox:  # outside the workdir: bound in, so made
        await trio.to_thread.run_sync(partial(target.mkdir, mode=0o700, exist_ok=True))
    job.writable.append(target)
    argv = [python, "-m", "pip", "install", *PIP_OPTIONS, "--target", str(target)]
    argv += ["-r", REQUIREMENTS_FILE]
    short = [python, "-m", "pip", "install", "-r", REQUIREMENTS_FILE]
    short += ["--target", f"../{target.name}"]  # (the pip options are in the docs)
    label = (
        f"installing {REQUIREMENTS_FILE} ({lines} line{'' if lines == 1 else 's'}): "
        + shlex.join(short)
    )
    started = trio.current_time()
    result = await job._run_process(argv, "requirements", label)
    failed = f"installing {REQUIREMENTS_FILE} failed"
    if result.start_error is not None:
        return await job._fail(f"{failed}: {result.start_error}")
    if result.stopped is not None:
        error = f"{job._stopped_error(result)} (during the {REQUIREMENTS_FILE} install)"
        return await job._finish(result.stopped, None, error, error)
    code = result.returncode
    if code is not None and code < 0:
        return await job._fail(f"{failed}: pip killed by signal {signal_name(-code)}")
    if code:
        return await job._fail(f"{failed}: pip exited with code {code}")
    took = trio.current_time() - started
    await job._system(f"{REQUIREMENTS_FILE} installed: pip exited with code 0 ({took:.2f} s)")
    job.env = with_deps(job.env, target)
    if job.cancel is not None and job.cancel.is_set():
        return await job._finish(
            "cancelled", None, "cancelled", f"cancelled after the {REQUIREMENTS_FILE} install"
        )
    return None
