"""The agent's self-update install step (runplane/agent/update.py) with real commands, and
the wire shape of the fields it added to the protocol. The whole upgrade of a live agent
process is tests/e2e/test_self_update_e2e.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import trio

from runplane import __version__
from runplane.agent import protocol as p
from runplane.agent.update import (
    CMD_ENV,
    PIP_ARGS_ENV,
    TIMEOUT_ENV,
    UpdateConfigError,
    UpdatePlan,
    install,
    installed_version,
    plan_from_env,
    reexec_argv,
)
from tests.agent.test_client import FakeServer, make_agent


def test_the_default_plan_is_pip_in_the_agents_own_environment() -> None:
    plan = plan_from_env({PIP_ARGS_ENV: "--no-index --find-links '/srv/wheel dir'"})
    argv = plan.argv("1.2.3")
    assert argv[:4] == [sys.executable, "-m", "pip", "install"]
    assert argv[-3:] == ["--find-links", "/srv/wheel dir", "runplane==1.2.3"]
    assert "--no-index" in argv
    assert plan.timeout_sec == 600


def test_a_custom_command_gets_the_version_in_each_word() -> None:
    plan = plan_from_env({CMD_ENV: "uv pip install runplane=={version} --tag v{version}"})
    assert plan.argv("2.0") == ["uv", "pip", "install", "runplane==2.0", "--tag", "v2.0"]


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({CMD_ENV: "pip install runplane"}, "must contain {version}"),
        ({CMD_ENV: "pip install 'runplane=={version}"}, "No closing quotation"),
        ({TIMEOUT_ENV: "soon"}, "number of seconds"),
        ({TIMEOUT_ENV: "0"}, "more than 0"),
    ],
)
def test_bad_settings_are_refused_when_the_agent_starts(env: dict[str, str], says: str) -> None:
    with pytest.raises(UpdateConfigError, match=says):
        plan_from_env(env)


async def test_a_failing_install_says_its_exit_code_and_output() -> None:
    plan = UpdatePlan(
        ("sh", "-c", "echo some noise; echo no such version $0 >&2; exit 3", "{version}"), 30
    )
    result = await install(plan, "9.9.9")
    assert not result.ok
    assert result.error == "the install command exited 3: no such version 9.9.9"


async def test_an_install_that_does_not_change_the_imported_version_fails() -> None:
    result = await install(UpdatePlan(("true", "{version}"), 30), "9.9.9")
    assert not result.ok
    assert result.error is not None
    assert f"imports runplane {__version__!r}, not '9.9.9'" in result.error


async def test_an_install_command_that_cannot_run_or_hangs_fails() -> None:
    missing = await install(UpdatePlan(("/nonexistent/pip", "{version}"), 30), "1.0")
    assert not missing.ok and missing.error is not None
    assert missing.error.startswith("cannot run the install command '/nonexistent/pip'")
    slow = await install(UpdatePlan(("sleep", "30", "{version}"), 0.2), "1")
    assert slow.error == "the install command did not finish within 0.2 s"


async def test_the_version_probe_reads_what_a_fresh_interpreter_imports() -> None:
    assert await installed_version() == __version__


def test_reexec_runs_the_installed_package_with_the_same_arguments() -> None:
    argv = reexec_argv(["/usr/bin/runplane", "agent", "--server", "http://x", "--auto-update"])
    assert argv == [
        sys.executable,
        "-m",
        "runplane",
        "agent",
        "--server",
        "http://x",
        "--auto-update",
    ]


def test_auto_update_is_on_the_wire_only_when_set() -> None:
    facts = p.Facts(name="n", cpu_cores=1, ram_gb=1, arch="x86_64", os="linux")
    plain = json.loads(p.encode(p.Hello(protocol=1, agent_version="1", facts=facts)))
    assert "auto_update" not in plain  # a server from before the field still reads it
    auto = p.Hello(protocol=1, agent_version="1", facts=facts, auto_update=True)
    assert json.loads(p.encode(auto))["auto_update"] is True
    assert p.decode_agent(p.encode(auto)) == auto
    status = p.UpdateStatus(version="2", phase="failed", error="why")
    assert p.decode_agent(p.encode(status)) == status
    offer = p.Update(version="2", requested=True)
    assert p.decode_server(p.encode(offer)) == offer


async def test_an_agent_that_does_not_update_itself_says_so(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """The local agent of ``runplane serve``: an update is answered ``failed``, never run."""
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server, self_update=False)
    nursery.start_soon(agent.run)
    await server.wait(p.Hello)
    await server.send(p.Update(version="9.9.9", requested=True))
    status = await server.wait(p.UpdateStatus)
    assert (status.version, status.phase) == ("9.9.9", "failed")
    assert status.error is not None and "updates with the server" in status.error
    assert agent.restart_into is None
    agent.request_stop()


async def test_an_offer_without_a_request_needs_auto_update(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    fail = UpdatePlan(("sh", "-c", "exit 5", "{version}"), 30)
    server = await FakeServer.start(nursery)
    agent = make_agent(tmp_path, server, update_plan=fail)
    nursery.start_soon(agent.run)
    await server.wait(p.Hello)
    await server.send(p.Update(version="9.9.9"))  # a channel target: not for this agent
    await server.send(p.Update(version="9.9.8", requested=True))  # an operator's: applied
    failed = await server.wait(p.UpdateStatus, lambda m: m.phase == "failed")
    assert (
        failed.version == "9.9.8"
        and failed.error == "the install command exited 5 (and printed nothing)"
    )
    assert [m.version for m in server.of(p.UpdateStatus)] == ["9.9.8", "9.9.8"]
    agent.request_stop()
