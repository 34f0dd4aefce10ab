"""The systemd unit files in docs/systemd (docs/operations.md "Running under systemd"):
``systemd-analyze verify`` accepts each (ExecStart pointed at this tree's runplane, since
verify checks that the binary exists), their restart, limit and stop settings match what
the server and the agent do, the environment examples name only real settings, and every
flag they and the docs pass exists in ``runplane serve --help`` / ``runplane agent --help``.
"""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runplane.agent import update
from runplane.agent.client import Agent
from runplane.cli import GRACEFUL_TIMEOUT, agent_command
from runplane.fdlimit import NOFILE_CAP
from runplane.settings import Settings, load_settings

REPO = Path(__file__).resolve().parent.parent
UNITS = REPO / "docs" / "systemd"
SERVER_UNIT = UNITS / "runplane-server.service"
AGENT_UNIT = UNITS / "runplane-agent.service"
SERVER_ENV = UNITS / "runplane.env"
AGENT_ENV = UNITS / "runplane-agent.env"
OPERATIONS = REPO / "docs" / "operations.md"
#: where the units expect the venv's command (the docs install it there)
VENV_COMMAND = "/opt/runplane/bin/runplane"
#: a setting line of an environment example, commented out or not
ENV_LINE = re.compile(r"^#?([A-Z][A-Z0-9_]*)=(.*)$", re.MULTILINE)
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
#: the agent's own settings (docs/agent.md "Self-update")
AGENT_SETTINGS = {update.CMD_ENV, update.PIP_ARGS_ENV, update.TIMEOUT_ENV}
#: sandboxing options that would break a root agent's jobs (docs/operations.md)
AGENT_BREAKERS = (
    "NoNewPrivileges",
    "ProtectSystem",
    "ProtectHome",
    "ProtectControlGroups",
    "RestrictNamespaces",
    "PrivateTmp",
    "CapabilityBoundingSet",
)


def unit_keys(path: Path) -> dict[str, list[str]]:
    """``Section.Key`` -> its values in order (a key may repeat), comments skipped."""
    keys: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        keys.setdefault(f"{section}.{key}", []).append(value)
    return keys


def one(keys: dict[str, list[str]], key: str) -> str:
    values = keys.get(key, [])
    assert len(values) == 1, f"{key}: expected one value, got {values}"
    return values[0]


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)(s|min)?", value)
    assert match, f"not a plain number of seconds: {value}"
    return float(match[1]) * (60 if match[2] == "min" else 1)


@pytest.mark.parametrize("unit", [SERVER_UNIT, AGENT_UNIT], ids=lambda p: p.name)
def test_systemd_analyze_verify_accepts_the_unit(unit: Path, tmp_path: Path) -> None:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian package systemd)")
    text = unit.read_text()
    assert f"ExecStart={VENV_COMMAND} " in text
    copy = tmp_path / unit.name  # verify wants the unit's own name
    copy.write_text(text.replace(VENV_COMMAND, f"{sys.executable} -m runplane"))
    done = subprocess.run(
        [analyze, "verify", "--man=no", str(copy)], capture_output=True, text=True, timeout=60
    )
    # an unknown key or a bad value is only a warning (exit 0): any output fails too
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_both_units_restart_always_with_a_high_open_file_limit() -> None:
    for unit in (SERVER_UNIT, AGENT_UNIT):
        keys = unit_keys(unit)
        assert one(keys, "Service.Restart") == "always", unit.name
        assert seconds(one(keys, "Service.RestartSec")) > 0
        # exit 2 is a bad setting or flag: restarting cannot fix it
        assert one(keys, "Service.RestartPreventExitStatus") == "2"
        assert one(keys, "Service.LimitNOFILE") == str(NOFILE_CAP)
        assert one(keys, "Service.KillSignal") == "SIGTERM"
        # SIGTERM to the main process only: it hands its jobs back itself
        assert one(keys, "Service.KillMode") == "mixed"
        assert "network-online.target" in one(keys, "Unit.After").split()
        assert "network-online.target" in one(keys, "Unit.Wants").split()
        assert one(keys, "Install.WantedBy") == "multi-user.target"


def test_stop_timeouts_outlast_the_graceful_stop_and_the_drain() -> None:
    server = unit_keys(SERVER_UNIT)
    # the local agent's hand-back, then the requests' grace, then the actors (5 s each)
    assert seconds(one(server, "Service.TimeoutStopSec")) > 2 * GRACEFUL_TIMEOUT + 5
    agent = unit_keys(AGENT_UNIT)
    drain = next(p.default for p in agent_command.params if p.name == "drain_timeout")
    grace = inspect.signature(Agent).parameters["grace_sec"].default
    assert isinstance(drain, str) and isinstance(grace, float)
    # the drain, the kill grace of what is left, 5 s for the acks
    assert seconds(one(agent, "Service.TimeoutStopSec")) > float(drain) + grace + 5


def test_the_server_runs_unprivileged_and_the_agent_keeps_what_jobs_need() -> None:
    server = unit_keys(SERVER_UNIT)
    assert one(server, "Service.User") not in ("root", "0")
    assert one(server, "Service.NoNewPrivileges") == "yes"
    assert one(server, "Service.ProtectSystem") == "strict"
    assert one(server, "Service.StateDirectory") == "runplane-server"
    assert one(server, "Service.Environment") == "RUNPLANE_DATA_DIR=/var/lib/runplane-server"
    assert one(server, "Service.ExecStart").startswith(f"{VENV_COMMAND} serve ")
    agent = unit_keys(AGENT_UNIT)
    assert one(agent, "Service.User") == "root"  # a uid per job
    assert one(agent, "Service.Delegate") == "yes"  # job cgroups below its own
    assert one(agent, "Service.TasksMax") == "infinity"
    assert one(agent, "Service.StateDirectory") == "runplane-agent"
    assert "--data-dir /var/lib/runplane-agent" in one(agent, "Service.ExecStart")
    assert [k for k in agent if k.split(".")[1] in AGENT_BREAKERS] == []


def test_the_environment_examples_name_only_real_settings(tmp_path: Path) -> None:
    real = {"RUNPLANE_" + name.upper() for name in Settings.model_fields}
    server_env = dict(ENV_LINE.findall(SERVER_ENV.read_text()))
    assert server_env and set(server_env) <= real, set(server_env) - real
    # every example value, the commented ones included, is accepted together
    load_settings({**server_env, "RUNPLANE_DATA_DIR": str(tmp_path)})
    agent_env = dict(ENV_LINE.findall(AGENT_ENV.read_text()))
    named = {k for k in agent_env if k.startswith("RUNPLANE_")}
    assert named and named <= AGENT_SETTINGS, named - AGENT_SETTINGS
    # the rest are what the agent unit's ExecStart uses, and it uses each
    exec_start = one(unit_keys(AGENT_UNIT), "Service.ExecStart")
    for name in set(agent_env) - named:
        assert re.search(rf"\$\{{?{name}\b", exec_start), name


def help_flags(command: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "runplane", command, "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(FLAG.findall(done.stdout))


def systemd_section() -> str:
    text = OPERATIONS.read_text()
    start = text.index("## Running under systemd")
    end = text.find("\n## ", start + 1)
    return text[start : end if end > 0 else None]


def test_every_flag_the_units_and_the_docs_pass_exists() -> None:
    agent_env = dict(ENV_LINE.findall(AGENT_ENV.read_text()))
    uses = {
        "serve": [one(unit_keys(SERVER_UNIT), "Service.ExecStart")],
        "agent": [
            one(unit_keys(AGENT_UNIT), "Service.ExecStart"),
            agent_env["AGENT_FLAGS"],
            agent_env["JOIN_FLAGS"],
        ],
    }
    # the commented examples too
    uses["agent"] += re.findall(r"^#AGENT_FLAGS=(.*)$", AGENT_ENV.read_text(), re.MULTILINE)
    for line in systemd_section().splitlines():
        for command in ("serve", "agent"):
            if f"runplane {command} " in line:
                uses[command].append(line.split(f"runplane {command} ", 1)[1])
    for command, texts in uses.items():
        passed = {flag for text in texts for flag in FLAG.findall(text)}
        assert passed, command
        assert passed <= help_flags(command), (command, passed - help_flags(command))
