"""Agent self-update: install a target version, check it took, re-execute into it.

The install command (``docs/agent.md#self-update``) is ``RUNPLANE_AGENT_UPDATE_CMD``
when set (split like a shell would, ``{version}`` replaced in each word), else pip in
the agent's own environment: ``<python> -m pip install runplane==<version>`` plus the
words of ``RUNPLANE_AGENT_UPDATE_PIP_ARGS`` (an index URL, or ``--no-index --find-links
<wheel dir>``). It runs in a child process, bounded by ``RUNPLANE_AGENT_UPDATE_TIMEOUT_SEC``
(default 600), while the agent keeps serving its jobs. Then a fresh interpreter imports
``runplane`` and prints its version: only when that is the target does the agent drain and
re-execute (:func:`reexec_argv`), so a broken install leaves the running agent as it was.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass

import trio

CMD_ENV = "RUNPLANE_AGENT_UPDATE_CMD"
PIP_ARGS_ENV = "RUNPLANE_AGENT_UPDATE_PIP_ARGS"
TIMEOUT_ENV = "RUNPLANE_AGENT_UPDATE_TIMEOUT_SEC"
DEFAULT_TIMEOUT_SEC = 600.0
#: How much of the install command's output an error quotes (its end: pip's reason).
ERROR_TAIL = 600
#: What a fresh interpreter runs to say which runplane it would import.
_PROBE = "import runplane, sys; sys.stdout.write(runplane.__version__)"


class UpdateConfigError(ValueError):
    """``RUNPLANE_AGENT_UPDATE_*`` cannot be used (said at agent start, not at update)."""


@dataclass(frozen=True, slots=True)
class UpdatePlan:
    """How this agent installs a version (settled from the environment at start)."""

    command: tuple[str, ...]  # ``{version}`` not yet replaced
    timeout_sec: float

    def argv(self, version: str) -> list[str]:
        return [word.replace("{version}", version) for word in self.command]


def plan_from_env(env: Mapping[str, str] | None = None) -> UpdatePlan:
    env = os.environ if env is None else env
    raw_timeout = env.get(TIMEOUT_ENV, "").strip()
    try:
        timeout = float(raw_timeout) if raw_timeout else DEFAULT_TIMEOUT_SEC
    except ValueError:
        raise UpdateConfigError(
            f"{TIMEOUT_ENV} must be a number of seconds, got {raw_timeout!r}"
        ) from None
    if not timeout > 0:
        raise UpdateConfigError(f"{TIMEOUT_ENV} must be more than 0, got {raw_timeout!r}")
    try:
        custom = shlex.split(env.get(CMD_ENV, ""))
        pip_args = shlex.split(env.get(PIP_ARGS_ENV, ""))
    except ValueError as exc:
        raise UpdateConfigError(f"{CMD_ENV} / {PIP_ARGS_ENV}: {exc}") from None
    if custom:
        if not any("{version}" in word for word in custom):
            raise UpdateConfigError(f"{CMD_ENV} must contain {{version}}: {shlex.join(custom)}")
        return UpdatePlan(tuple(custom), timeout)
    pip = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
    return UpdatePlan((*pip, *pip_args, "runplane=={version}"), timeout)


@dataclass(frozen=True, slots=True)
class Installed:
    ok: bool
    error: str | None = None


def _tail(output: bytes) -> str:
    text = output.decode("utf-8", "replace").strip()
    return text if len(text) <= ERROR_TAIL else "..." + text[-ERROR_TAIL:]


async def install(plan: UpdatePlan, version: str) -> Installed:
    """Run the install command for ``version``, then check a fresh interpreter imports
    exactly that version. Never raises for a failed install: ``Installed.error`` says why."""
    argv = plan.argv(version)
    with trio.move_on_after(plan.timeout_sec) as waited:
        try:
            done = await trio.run_process(
                argv, capture_stdout=True, capture_stderr=True, check=False
            )
        except OSError as exc:
            return Installed(False, f"cannot run the install command {argv[0]!r}: {exc}")
    if waited.cancelled_caught:
        return Installed(False, f"the install command did not finish within {plan.timeout_sec:g} s")
    if done.returncode != 0:
        output = _tail(done.stderr) or _tail(done.stdout)
        said = f": {output}" if output else " (and printed nothing)"
        return Installed(False, f"the install command exited {done.returncode}{said}")
    found = await installed_version()
    if found != version:
        return Installed(
            False,
            f"the install command succeeded but this Python imports runplane {found!r}, "
            f"not {version!r}: check {CMD_ENV} / {PIP_ARGS_ENV}",
        )
    return Installed(True)


async def installed_version() -> str:
    """The version of runplane a fresh interpreter (the one re-executed) imports."""
    probe = await trio.run_process(
        [sys.executable, "-c", _PROBE], capture_stdout=True, capture_stderr=True, check=False
    )
    if probe.returncode != 0:
        return f"<import failed: {_tail(probe.stderr)}>"
    return probe.stdout.decode("utf-8", "replace").strip()


def reexec_argv(argv: list[str] | None = None) -> list[str]:
    """The command line that runs this agent again with the same arguments, through the
    installed package (``python -m runplane ...``), whichever way it was started."""
    args = sys.argv[1:] if argv is None else argv[1:]
    return [sys.executable, "-m", "runplane", *args]
