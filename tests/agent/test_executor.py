"""The process executor, with real processes: short commands, short timeouts."""

from __future__ import annotations

import os
import signal
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import trio

from runplane.agent import execspec, executor, output, procgroup, requirements
from runplane.agent.core import Stop
from runplane.agent.executor import (
    MAX_BATCH_LINES,
    MAX_LINE_BYTES,
    Event,
    ExecSpec,
    Finished,
    LogLines,
    Metric,
    Started,
    job_environment,
    run_job,
)

PY = sys.executable


def spec(tmp_path: Path, command: list[str], **kwargs: object) -> ExecSpec:
    options: dict[str, object] = {"env": {}, "workdir": tmp_path / "work" / "job_1"}
    options.update(kwargs)
    return ExecSpec(job_id="job_1", command=command, **options)  # type: ignore[arg-type]


class Recorder:
    """Collects events; ``wait_for(text)`` blocks until a stdout line equal to it arrived."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self._waiters: list[tuple[Callable[[str], bool], trio.Event]] = []

    async def __call__(self, event: Event) -> None:
        self.events.append(event)
        if isinstance(event, LogLines):
            for stream, text in event.lines:
                for match, ready in self._waiters:
                    if stream == "stdout" and match(text):
                        ready.set()

    async def wait_for(self, match: Callable[[str], bool]) -> None:
        ready = trio.Event()
        self._waiters.append((match, ready))
        if any(match(t) for s, t in self.lines() if s == "stdout"):
            ready.set()
        await ready.wait()

    def lines(self, stream: str | None = None) -> list[tuple[str, str]]:
        out = [line for e in self.events if isinstance(e, LogLines) for line in e.lines]
        return [line for line in out if stream is None or line[0] == stream]

    def texts(self, stream: str) -> list[str]:
        return [text for _, text in self.lines(stream)]

    def of(self, kind: type) -> list[Event]:
        return [e for e in self.events if isinstance(e, kind)]


async def run(s: ExecSpec, cancel: trio.Event | None = None) -> tuple[Finished, Recorder]:
    rec = Recorder()
    finished = await run_job(s, rec, cancel)
    assert rec.events[-1] == finished
    assert len(rec.of(Finished)) == 1
    return finished, rec


def alive(pid: int) -> bool:
    """Whether ``pid`` runs; a zombie waiting for a reaper counts as gone."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except FileNotFoundError:
        return False
    return data[data.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


async def wait_gone(pids: list[int], within: float = 2.0) -> list[int]:
    """The pids still alive after ``within`` seconds (a killed process may take a moment)."""
    for _ in range(int(within / 0.02)):
        if not any(alive(p) for p in pids):
            break
        await trio.sleep(0.02)
    return [p for p in pids if alive(p)]


def kill_quietly(pids: list[int]) -> None:
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


# --------------------------------------------------------------------------- outcomes


async def test_echo_succeeds_with_its_log_line(tmp_path: Path) -> None:
    finished, rec = await run(spec(tmp_path, ["echo", "hello world"]))
    assert finished.outcome == "succeeded"
    assert finished.exit_code == 0
    assert finished.error is None
    assert finished.duration_sec >= 0
    assert rec.texts("stdout") == ["hello world"]
    started = rec.of(Started)
    assert len(started) == 1 and started[0].stage == "command"  # type: ignore[union-attr]
    system = rec.texts("system")
    assert system[0] == "running: echo 'hello world'"
    assert system[-1].startswith("exit code 0 (")
    assert rec.events.index(started[0]) < len(rec.events) - 1
    assert (tmp_path / "work" / "job_1").is_dir()


async def test_nonzero_exit_fails_with_the_code(tmp_path: Path) -> None:
    finished, rec = await run(spec(tmp_path, ["sh", "-c", "echo partial; exit 3"]))
    assert finished.outcome == "failed"
    assert finished.exit_code == 3
    assert finished.error == "exit code 3"
    assert rec.texts("stdout") == ["partial"]
    assert rec.texts("system")[-1].startswith("exit code 3")


async def test_killed_by_signal_is_named(tmp_path: Path) -> None:
    finished, _ = await run(spec(tmp_path, ["sh", "-c", "kill -KILL $$"]))
    assert finished.outcome == "failed"
    assert finished.exit_code is None
    assert finished.error == "killed by signal SIGKILL"


async def test_stderr_lines_are_tagged_stderr(tmp_path: Path) -> None:
    _, rec = await run(spec(tmp_path, ["sh", "-c", "echo to-out; echo to-err >&2; echo e2 >&2"]))
    assert rec.texts("stdout") == ["to-out"]
    assert rec.texts("stderr") == ["to-err", "e2"]


async def test_missing_command_fails_cleanly(tmp_path: Path) -> None:
    finished, rec = await run(spec(tmp_path, ["no-such-command-xyz", "--flag"]))
    assert finished.outcome == "failed"
    assert finished.exit_code is None
    assert finished.error == "command not found: no-such-command-xyz"
    assert not rec.of(Started)
    assert any("command not found: no-such-command-xyz" in t for t in rec.texts("system"))


async def test_non_executable_command_fails_cleanly(tmp_path: Path) -> None:
    finished, _ = await run(
        spec(tmp_path, ["./data.txt"], inline_files={"data.txt": "not a program\n"})
    )
    assert finished.outcome == "failed"
    assert finished.error == "command not executable: ./data.txt"


async def test_empty_command_fails(tmp_path: Path) -> None:
    finished, _ = await run(spec(tmp_path, []))
    assert finished.outcome == "failed"
    assert finished.error == "empty command"


async def test_report_may_be_a_memory_channel(tmp_path: Path) -> None:
    send, recv = trio.open_memory_channel[Event](1000)
    finished = await run_job(spec(tmp_path, ["echo", "via channel"]), send)
    received = []
    while True:
        try:
            received.append(recv.receive_nowait())
        except trio.WouldBlock:
            break
    assert received[-1] == finished
    assert ("stdout", "via channel") in [
        line for e in received if isinstance(e, LogLines) for line in e.lines
    ]


# --------------------------------------------------------------------------- setup, files, env


async def test_setup_runs_first_in_the_same_workdir_and_env(tmp_path: Path) -> None:
    s = spec(
        tmp_path,
        ["sh", "-c", "cat installed.txt; echo command sees $FOO"],
        env={"FOO": "bar"},
        setup='echo "setup saw $FOO in $(pwd)" > installed.txt; echo setup done',
    )
    finished, rec = await run(s)
    assert finished.outcome == "succeeded", finished
    assert rec.texts("stdout") == [
        "setup done",
        f"setup saw bar in {s.workdir}",
        "command sees bar",
    ]
    assert [e.stage for e in rec.of(Started)] == ["setup", "command"]  # type: ignore[union-attr]
    assert any(t.startswith("running setup: sh -c ") for t in rec.texts("system"))


async def test_failing_setup_fails_the_job_without_running_the_command(tmp_path: Path) -> None:
    s = spec(tmp_path, ["touch", "ran.txt"], setup="echo installing; exit 4")
    finished, rec = await run(s)
    assert finished.outcome == "failed"
    assert finished.error == "setup exited with code 4"
    assert finished.exit_code is None
    assert rec.texts("stdout") == ["installing"]
    assert [e.stage for e in rec.of(Started)] == ["setup"]  # type: ignore[union-attr]
    assert not (s.workdir / "ran.txt").exists()


async def test_inline_files_are_written_before_start(tmp_path: Path) -> None:
    files = {
        "train.py": "import helper\nprint(helper.VALUE)\n",
        "helper.py": "VALUE = 'from helper'\n",
        "conf/params.json": '{"lr": 0.1}',
        "run.sh": "#!/bin/sh\necho script ran\n",
    }
    s = spec(
        tmp_path,
        ["sh", "-c", f"{PY} train.py && cat conf/params.json && echo && ./run.sh"],
        inline_files=files,
    )
    finished, rec = await run(s)
    assert finished.outcome == "succeeded", rec.lines()
    assert rec.texts("stdout") == ["from helper", '{"lr": 0.1}', "script ran"]
    assert (s.workdir / "conf" / "params.json").read_text() == '{"lr": 0.1}'
    assert stat.S_IMODE((s.workdir / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((s.workdir / "helper.py").stat().st_mode) == 0o644


@pytest.mark.parametrize("bad", ["../escape.txt", "/etc/escape.txt", "a/../../escape.txt", ""])
async def test_inline_file_outside_the_workdir_fails_the_job(tmp_path: Path, bad: str) -> None:
    finished, rec = await run(spec(tmp_path, ["echo", "never"], inline_files={bad: "x"}))
    assert finished.outcome == "failed"
    assert finished.error is not None and "inline file path" in finished.error
    assert not rec.of(Started)
    assert not (tmp_path / "work" / "escape.txt").exists()


async def test_inline_file_through_a_symlink_cannot_escape(tmp_path: Path) -> None:
    workdir = tmp_path / "work" / "job_1"
    workdir.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (workdir / "link").symlink_to(outside)
    finished, _ = await run(spec(tmp_path, ["echo"], inline_files={"link/x.txt": "x"}))
    assert finished.outcome == "failed"
    assert finished.error == "inline file path leaves the workdir: 'link/x.txt'"
    assert not (outside / "x.txt").exists()


async def test_env_is_passed_and_agent_secrets_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNPLANE_ADMIN_TOKEN", "agent-secret")
    monkeypatch.setenv("RUNPLANE_SECRET_KEY", "agent-key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "cloud-secret")
    env = {"RUNPLANE_JOB_ID": "job_1", "RUNPLANE_SEED": "42", "FOO": "bar baz"}
    s = spec(tmp_path, ["env"], env=env)
    finished, rec = await run(s)
    assert finished.outcome == "succeeded"
    seen = dict(line.split("=", 1) for line in rec.texts("stdout"))
    assert seen["RUNPLANE_JOB_ID"] == "job_1"
    assert seen["RUNPLANE_SEED"] == "42"
    assert seen["FOO"] == "bar baz"
    assert seen["HOME"] == str(s.workdir)
    assert seen["PATH"]
    assert seen["LANG"]
    assert "agent-secret" not in seen.values()
    assert "agent-key" not in seen.values()
    assert "cloud-secret" not in seen.values()
    assert not {"RUNPLANE_ADMIN_TOKEN", "RUNPLANE_SECRET_KEY", "AWS_SECRET_ACCESS_KEY"} & set(seen)


def test_job_environment_puts_the_spec_env_on_a_minimal_base(tmp_path: Path) -> None:
    agent = {"PATH": "/agent/bin", "RUNPLANE_ADMIN_TOKEN": "x", "USER": "agent", "LANG": ""}
    s = spec(tmp_path, ["true"], env={"PATH": "/job/bin:/usr/bin", "RUNPLANE_SEED": "7"})
    env = job_environment(s, agent)
    assert env == {
        "PATH": "/job/bin:/usr/bin",
        "HOME": str(s.workdir),
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "RUNPLANE_JOB_ID": "job_1",
        "RUNPLANE_PREEMPT_FILE": str(s.workdir / ".runplane-preempted"),
        "RUNPLANE_SEED": "7",
    }
    assert job_environment(spec(tmp_path, ["true"]), {})["PATH"] == execspec.DEFAULT_PATH


# --------------------------------------------------------------------------- the command's line

#: The job's PATH with this test run's python first (``python3`` is the venv's).
VENV_PATH = f"{Path(PY).parent}{os.pathsep}{os.environ.get('PATH', '')}"


async def test_a_long_multiline_command_is_shown_on_one_short_line(tmp_path: Path) -> None:
    """The sim-cartpole stack's command (a ~50-line ``python3 -c`` script) is announced by
    its first line and how many lines follow, with no API hint (issue 40, item 8)."""
    from runplane.stacks import load_catalog

    stack = load_catalog().get("sim-cartpole")
    assert stack is not None
    command = list(stack.default_command)
    lines = executor.shlex.join(command).split("\n")
    assert len(lines) > 40  # the case of issue #12
    env = {"PATH": VENV_PATH, "RUNPLANE_CONFIG_EPISODES": "2"}
    finished, rec = await run(spec(tmp_path, command, env=env))
    assert finished.outcome == "succeeded", finished
    first = rec.texts("system")[0]
    assert first.startswith("running: python3 -c ")
    assert first == f"running: {lines[0][:120]} \u2026 (+{len(lines) - 1} lines)"
    assert "GET /v1/jobs" not in first and "\\n" not in first
    assert all("\n" not in text for _, text in rec.lines())


def test_shown_keeps_a_short_command_whole_and_counts_the_lines_left_out() -> None:
    assert output.shown("echo hi") == "echo hi"
    assert output.shown("'a\rb\u2028c'") == "'a\\rb\\u2028c'"  # one line, escaped
    assert output.shown("'a\nb\nc'") == "'a \u2026 (+2 lines)"
    assert output.shown("x" * 121) == "x" * 120 + "\u2026"
    assert output.shown("x" * 121 + "\ny") == "x" * 120 + "\u2026 (+1 lines)"


async def test_a_long_setup_is_shown_on_one_short_line(tmp_path: Path) -> None:
    setup = "\n".join(f"echo step {i}" for i in range(40))
    finished, rec = await run(spec(tmp_path, ["true"], setup=setup))
    assert finished.outcome == "succeeded", finished
    line = next(t for t in rec.texts("system") if t.startswith("running setup: sh -c "))
    assert line == "running setup: sh -c 'echo step 0 \u2026 (+39 lines)"


# --------------------------------------------------------------------------- requirements.txt


def tiny_wheel(directory: Path, name: str = "rp_tinypkg", version: str = "0.1") -> Path:
    """A pure-Python wheel built by hand (no build backend, no index): ``import <name>``
    gives ``GREETING``."""
    import base64
    import hashlib
    import zipfile

    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f'GREETING = "hello from {name}"\n',
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, text in files.items():
        digest = hashlib.sha256(text.encode()).digest()
        b64 = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
        record.append(f"{path},sha256={b64},{len(text.encode())}")
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = "\n".join(record) + "\n"
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in files.items():
            zf.writestr(path, text)
    return wheel


async def test_requirements_txt_is_installed_before_the_command(tmp_path: Path) -> None:
    """A workspace's requirements.txt is pip-installed with the job's python (offline: a
    local wheel, ``--no-index``) and the command imports the package; the node's (here:
    the test venv's) interpreter is left alone."""
    import importlib.util

    s = spec(
        tmp_path,
        ["python3", "-c", "import rp_tinypkg as t; print(t.GREETING); print(t.__file__)"],
        env={"PATH": VENV_PATH, "RUNPLANE_CONFIG_INSTALL_REQUIREMENTS": "true"},  # python stack
    )
    wheel = tiny_wheel(s.workdir / "wheels")
    (s.workdir / "requirements.txt").write_text(
        f"# offline: the package is a wheel in the workspace\n--no-index\n\n./wheels/{wheel.name}\n"
    )
    finished, rec = await run(s)
    assert finished.outcome == "succeeded", (finished, rec.lines())
    stdout = rec.texts("stdout")
    assert "hello from rp_tinypkg" in stdout
    deps = s.workdir.with_name("job_1.deps")
    assert stdout[-1].startswith(str(deps))
    system = rec.texts("system")
    assert system[0] == (
        "installing requirements.txt (2 lines): "
        "python3 -m pip install -r requirements.txt --target ../job_1.deps"
    )
    assert any(t.startswith("requirements.txt installed: pip exited with code 0 (") for t in system)
    assert [e.stage for e in rec.of(Started)] == ["requirements", "command"]  # type: ignore[union-attr]
    assert importlib.util.find_spec("rp_tinypkg") is None  # not in the venv running the test


async def test_a_failing_requirements_install_fails_the_job(tmp_path: Path) -> None:
    s = spec(tmp_path, ["touch", "ran.txt"], env={"PATH": VENV_PATH, "RUNPLANE_REQUIREMENTS": "1"})
    s.workdir.mkdir(parents=True)
    (s.workdir / "requirements.txt").write_text("--no-index\nrp-no-such-package-anywhere\n")
    finished, rec = await run(s)
    assert finished.outcome == "failed"
    assert finished.error == "installing requirements.txt failed: pip exited with code 1"
    assert [e.stage for e in rec.of(Started)] == ["requirements"]  # type: ignore[union-attr]
    assert not (s.workdir / "ran.txt").exists()


async def test_requirements_without_a_python_are_skipped_with_a_note(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path / "empty"), "RUNPLANE_REQUIREMENTS": "yes"}
    s = spec(tmp_path, ["/bin/sh", "-c", "echo ran"], env=env)
    s.workdir.mkdir(parents=True)
    (s.workdir / "requirements.txt").write_text("numpy\n")
    finished, rec = await run(s)
    assert finished.outcome == "succeeded", finished
    assert rec.texts("stdout") == ["ran"]
    assert rec.texts("system")[0] == (
        "requirements.txt not installed: no python3 or python on the job's PATH"
    )


async def test_requirements_are_not_installed_unless_the_stack_or_job_asks(
    tmp_path: Path,
) -> None:
    """A shell job in a repo that has a requirements.txt does not run pip unasked; the
    python stack's config key (or the job's RUNPLANE_REQUIREMENTS) turns it on, and
    RUNPLANE_REQUIREMENTS=0 turns it off again."""
    for env, installs in (
        ({}, False),
        ({"RUNPLANE_CONFIG_INSTALL_REQUIREMENTS": "false"}, False),
        ({"RUNPLANE_CONFIG_INSTALL_REQUIREMENTS": "true", "RUNPLANE_REQUIREMENTS": "0"}, False),
        ({"RUNPLANE_REQUIREMENTS": "1"}, True),
    ):
        assert requirements.wants_requirements(env) is installs, env
    s = spec(tmp_path, ["/bin/sh", "-c", "echo ran"], env={"PATH": VENV_PATH})
    s.workdir.mkdir(parents=True)
    (s.workdir / "requirements.txt").write_text("--no-index\nrp-no-such-package-anywhere\n")
    finished, rec = await run(s)
    assert finished.outcome == "succeeded", finished
    assert rec.texts("stdout") == ["ran"]
    assert [e.stage for e in rec.of(Started)] == ["command"]  # type: ignore[union-attr]


def test_job_python_prefers_the_commands_own_python(tmp_path: Path) -> None:
    assert requirements.job_python([".venv/bin/python", "x.py"], {"PATH": ""}) == ".venv/bin/python"
    assert requirements.job_python(["python3.11", "-c", "1"], {"PATH": ""}) == "python3.11"
    assert requirements.job_python(["sh", "-c", "x"], {"PATH": VENV_PATH}) == "python3"
    assert requirements.job_python(["sh"], {"PATH": str(tmp_path)}) is None
    assert requirements.requirement_lines("# c\n\nnumpy\n  -r other.txt\n") == 2


# --------------------------------------------------------------------------- metrics


async def test_metric_lines_become_metric_events(tmp_path: Path) -> None:
    script = "\n".join(
        [
            "echo before",
            """echo '::metric {"step": 1, "loss": 0.5, "acc": 1}'""",
            """echo '::metric {"loss": 0.25, "note": "text", "flag": true}'""",
            """echo '::metric {"step": 2, "loss": '""",
            """echo '::metric {"step": 2, "name": "x"}'""",
            """echo '::metric {"step": 2, "loss": 0.125}' >&2""",
            "echo '::metrics are not metrics'",
            """echo '::metric {"step": 3, "loss": 0.1}'""",
            "echo after",
        ]
    )
    finished, rec = await run(spec(tmp_path, ["sh", "-c", script]))
    assert finished.outcome == "succeeded"
    metrics = rec.of(Metric)
    assert metrics == [
        Metric(step=1, values={"loss": 0.5, "acc": 1.0}),
        Metric(step=None, values={"loss": 0.25}),
        Metric(step=3, values={"loss": 0.1}),
    ]
    assert finished.final_metrics == {"loss": 0.1, "acc": 1.0}
    assert rec.texts("stdout") == ["before", "::metrics are not metrics", "after"]
    assert rec.texts("stderr") == ['::metric {"step": 2, "loss": 0.125}']
    notes = [t for t in rec.texts("system") if t.startswith("ignored metric line")]
    assert len(notes) == 2
    assert "invalid JSON" in notes[0] and '::metric {"step": 2, "loss":' in notes[0]
    assert "no numeric values" in notes[1]
    # Order is kept: the first log line comes before the first metric, the last after the last.
    kinds = [
        "metric" if isinstance(e, Metric) else "log"
        for e in rec.events
        if isinstance(e, Metric)
        or (isinstance(e, LogLines) and any(s == "stdout" for s, _ in e.lines))
    ]
    assert kinds[0] == "log" and kinds[-1] == "log" and kinds.count("metric") == 3


async def test_setup_output_is_not_parsed_for_metrics(tmp_path: Path) -> None:
    s = spec(tmp_path, ["true"], setup="""echo '::metric {"x": 1}'""")
    finished, rec = await run(s)
    assert not rec.of(Metric)
    assert finished.final_metrics == {}
    assert rec.texts("stdout") == ['::metric {"x": 1}']


# --------------------------------------------------------------------------- output handling


async def test_many_lines_arrive_in_order_in_few_events(tmp_path: Path) -> None:
    finished, rec = await run(spec(tmp_path, ["seq", "1", "20000"]))
    assert finished.outcome == "succeeded"
    assert rec.texts("stdout") == [str(i) for i in range(1, 20001)]
    batches = rec.of(LogLines)
    assert len(batches) < 20000 / 50  # in practice about 20000 / 256
    assert all(len(b.lines) <= MAX_BATCH_LINES for b in batches)  # type: ignore[union-attr]


async def test_long_lines_are_split_and_bytes_decoded_with_replacement(tmp_path: Path) -> None:
    code = (
        "import sys\n"
        "out = sys.stdout.buffer\n"
        f"out.write(b'x' * {MAX_LINE_BYTES * 2 + 10} + b'\\n')\n"
        "out.write(b'bad \\xff byte\\r\\n')\n"
        "out.write(b'no newline at the end')\n"
    )
    finished, rec = await run(spec(tmp_path, [PY, "-c", code]))
    assert finished.outcome == "succeeded"
    out = rec.texts("stdout")
    assert [len(t) for t in out[:3]] == [MAX_LINE_BYTES, MAX_LINE_BYTES, 10]
    assert out[3:] == ["bad \ufffd byte", "no newline at the end"]
    assert (
        f"stdout line of {MAX_LINE_BYTES * 2 + 10} bytes was split into 3 lines of at most "
        f"{MAX_LINE_BYTES} bytes"
    ) in rec.texts("system")


async def test_background_processes_are_killed_when_the_command_exits(tmp_path: Path) -> None:
    started = time.monotonic()
    finished, rec = await run(spec(tmp_path, ["sh", "-c", "sleep 600 & echo $!; echo main done"]))
    assert finished.outcome == "succeeded"
    assert time.monotonic() - started < 5
    background = int(rec.texts("stdout")[0])
    assert await wait_gone([background]) == []
    assert "command exited; killed the background processes it left running" in rec.texts("system")


async def test_a_process_that_left_the_group_does_not_hold_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(procgroup, "DRAIN_IDLE_SEC", 0.2)
    started = time.monotonic()
    finished, rec = await run(spec(tmp_path, ["sh", "-c", "setsid sleep 30 & echo $!; sleep 0.3"]))
    escaped = int(rec.texts("stdout")[0])
    try:
        assert alive(escaped)  # out of reach of the process group: see docs/executor.md
        assert finished.outcome == "succeeded"
        assert time.monotonic() - started < 5
        assert any(t.startswith("stopped reading stdout") for t in rec.texts("system"))
    finally:
        kill_quietly([escaped])


# --------------------------------------------------------------------------- timeout and cancel

TREE = "sleep 600 & echo $!; echo $$; sleep 600"


async def test_timeout_kills_the_whole_tree(tmp_path: Path) -> None:
    started = time.monotonic()
    finished, rec = await run(spec(tmp_path, ["sh", "-c", TREE], timeout_sec=1, grace_sec=0.5))
    elapsed = time.monotonic() - started
    pids = [int(t) for t in rec.texts("stdout")] + [e.pid for e in rec.of(Started)]  # type: ignore[union-attr]
    try:
        assert finished.outcome == "timeout"
        assert finished.error is not None and finished.error.startswith("timed out after 1 s")
        assert 1 <= elapsed < 4
        assert await wait_gone(pids) == []
    finally:
        kill_quietly(pids)


async def test_timeout_covers_setup(tmp_path: Path) -> None:
    s = spec(tmp_path, ["touch", "ran.txt"], setup="sleep 600", timeout_sec=1, grace_sec=0.5)
    finished, _ = await run(s)
    assert finished.outcome == "timeout"
    assert finished.error == "timed out after 1 s (during setup)"
    assert not (s.workdir / "ran.txt").exists()


async def test_cancel_kills_every_process_of_the_tree(tmp_path: Path) -> None:
    rec = Recorder()
    cancel = trio.Event()
    result: list[Finished] = []

    async def job() -> None:
        result.append(await run_job(spec(tmp_path, ["sh", "-c", TREE], grace_sec=0.5), rec, cancel))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(job)
        await rec.wait_for(lambda _: len(rec.texts("stdout")) >= 2)
        pids = [int(t) for t in rec.texts("stdout")] + [e.pid for e in rec.of(Started)]  # type: ignore[union-attr]
        assert all(alive(p) for p in pids)
        cancel.set()
    try:
        (finished,) = result
        assert finished.outcome == "cancelled"
        assert finished.error == "cancelled"
        assert await wait_gone(pids) == []
    finally:
        kill_quietly(pids)


async def test_sigterm_is_ignored_then_sigkill_after_grace(tmp_path: Path) -> None:
    script = "trap '' TERM; sleep 600 & echo $!; echo ready; while :; do sleep 0.05; done"
    rec = Recorder()
    cancel = trio.Event()
    result: list[Finished] = []

    async def job() -> None:
        result.append(
            await run_job(spec(tmp_path, ["sh", "-c", script], grace_sec=0.5), rec, cancel)
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(job)
        await rec.wait_for(lambda t: t == "ready")
        cancelled_at = time.monotonic()
        cancel.set()
    stopped_after = time.monotonic() - cancelled_at
    pids = [int(rec.texts("stdout")[0])] + [e.pid for e in rec.of(Started)]  # type: ignore[union-attr]
    try:
        (finished,) = result
        assert finished.outcome == "cancelled"
        assert finished.error == "cancelled; killed with SIGKILL after 0.5 s grace"
        assert 0.5 <= stopped_after < 3
        assert await wait_gone(pids) == []
    finally:
        kill_quietly(pids)


async def test_a_cancel_with_its_own_grace_names_that_grace(tmp_path: Path) -> None:
    """A preemption's cancel carries its grace (``Stop.grace``): the job is SIGKILLed after
    that one, not the agent's, and its error says so."""
    script = "trap '' TERM; echo ready; while :; do sleep 0.05; done"
    rec = Recorder()
    cancel = Stop()
    cancel.grace = 0.3
    result: list[Finished] = []

    async def job() -> None:
        result.append(
            await run_job(spec(tmp_path, ["sh", "-c", script], grace_sec=30), rec, cancel)
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(job)
        await rec.wait_for(lambda t: t == "ready")
        cancel.set()
    pids = [e.pid for e in rec.of(Started)]  # type: ignore[union-attr]
    try:
        (finished,) = result
        assert finished.outcome == "cancelled"
        assert finished.error == "cancelled; killed with SIGKILL after 0.3 s grace"
        assert await wait_gone(pids) == []
    finally:
        kill_quietly(pids)


async def test_a_job_that_stops_on_sigterm_is_not_sigkilled(tmp_path: Path) -> None:
    script = "trap 'echo got TERM; exit 0' TERM; echo ready; sleep 600 & wait"
    rec = Recorder()
    cancel = trio.Event()
    result: list[Finished] = []

    async def job() -> None:
        result.append(await run_job(spec(tmp_path, ["sh", "-c", script], grace_sec=5), rec, cancel))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(job)
        await rec.wait_for(lambda t: t == "ready")
        cancelled_at = time.monotonic()
        cancel.set()
    (finished,) = result
    assert finished.outcome == "cancelled"
    assert finished.error == "cancelled"
    assert finished.exit_code == 0
    assert time.monotonic() - cancelled_at < 3
    assert "got TERM" in rec.texts("stdout")


async def test_cancel_during_setup_skips_the_command(tmp_path: Path) -> None:
    s = spec(tmp_path, ["touch", "ran.txt"], setup="echo ready; sleep 600", grace_sec=0.5)
    rec = Recorder()
    cancel = trio.Event()
    result: list[Finished] = []

    async def job() -> None:
        result.append(await run_job(s, rec, cancel))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(job)
        await rec.wait_for(lambda t: t == "ready")
        cancel.set()
    (finished,) = result
    assert finished.outcome == "cancelled"
    assert finished.error == "cancelled (during setup)"
    assert not (s.workdir / "ran.txt").exists()


async def test_cancel_before_start_runs_nothing(tmp_path: Path) -> None:
    cancel = trio.Event()
    cancel.set()
    s = spec(tmp_path, ["touch", "ran.txt"])
    finished, rec = await run(s, cancel)
    assert finished.outcome == "cancelled"
    assert not rec.of(Started)
    assert not (s.workdir / "ran.txt").exists()


async def test_cancelling_the_callers_scope_kills_the_tree(tmp_path: Path) -> None:
    rec = Recorder()
    with trio.move_on_after(5) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run_job, spec(tmp_path, ["sh", "-c", TREE]), rec)
            await rec.wait_for(lambda _: len(rec.texts("stdout")) >= 2)
            nursery.cancel_scope.cancel()
    assert not scope.cancelled_caught
    pids = [int(t) for t in rec.texts("stdout")] + [e.pid for e in rec.of(Started)]  # type: ignore[union-attr]
    try:
        assert not rec.of(Finished)
        assert await wait_gone(pids) == []
    finally:
        kill_quietly(pids)


async def test_a_failing_report_kills_the_tree_and_propagates(tmp_path: Path) -> None:
    seen: list[int] = []

    async def report(event: Event) -> None:
        if isinstance(event, LogLines):
            seen.extend(int(t) for s, t in event.lines if s == "stdout")
            if len(seen) >= 2:
                raise ConnectionError("websocket closed")

    with pytest.raises(ConnectionError, match="websocket closed"):
        await run_job(
            spec(tmp_path, ["sh", "-c", "sleep 600 & echo $!; echo $$; sleep 600"]), report
        )
    try:
        assert await wait_gone(seen) == []
    finally:
        kill_quietly(seen)
