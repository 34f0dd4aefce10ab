"""The ``runplane`` command as a real process: serve, answer, stop cleanly on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from runplane import __version__
from runplane.cli import main
from runplane.client.cli import cli

ADMIN = "cli-test-admin-token-0123456789"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    env.update(
        RUNPLANE_DATA_DIR=str(data_dir), RUNPLANE_LOCAL_AGENT="0", RUNPLANE_ADMIN_TOKEN=ADMIN
    )
    env.update(extra)
    return env


class Server:
    def __init__(
        self,
        data_dir: Path,
        log: Path,
        preexec: Callable[[], None] | None = None,
        **env: str,
    ) -> None:
        self.port = _free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = log
        self._log_fh = log.open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runplane", "serve", "--port", str(self.port)],
            env=_env(data_dir, **env),
            stderr=self._log_fh,
            stdout=subprocess.DEVNULL,
            preexec_fn=preexec,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, log.read_text()
            try:
                if httpx.get(self.base + "/healthz", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                time.sleep(0.05)
        raise AssertionError("server did not answer /healthz within 20 s:\n" + log.read_text())

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=20)
        finally:
            self._log_fh.close()

    def lines(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "data", tmp_path / "server.log")
    yield srv
    if srv.proc.poll() is None:
        srv.proc.kill()
        srv.proc.wait()


def test_version() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "runplane", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"runplane {__version__}"


def test_bad_setting_stops_startup_with_one_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "runplane", "serve", "--port", str(_free_port())],
        env=_env(tmp_path, RUNPLANE_AUTH="sometimes"),
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "runplane: RUNPLANE_AUTH='sometimes' is not valid: accepted: off, shadow, required"
    ]


def test_port_in_use_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        out = subprocess.run(
            [sys.executable, "-m", "runplane", "serve", "--port", str(port)],
            env=_env(tmp_path),
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert out.returncode == 1
    assert f"cannot serve on 127.0.0.1:{port}" in out.stderr
    assert "pass --port" in out.stderr


def test_serve_logs_each_request_and_exits_zero_on_sigterm(server: Server) -> None:
    assert httpx.get(server.base + "/v1/healthz").text == "ok"
    missing = httpx.get(server.base + "/v1/unknown")
    assert missing.status_code == 404
    assert server.terminate() == 0
    lines = server.lines()
    requests = [line for line in lines if line["msg"] == "request"]
    # the readiness probe(s) plus our two requests, one line each
    assert [r["path"] for r in requests][-2:] == ["/v1/healthz", "/v1/unknown"]
    assert requests[-1]["status"] == 404
    assert requests[-1]["request_id"] == missing.headers["X-Request-ID"]
    messages = [line["msg"] for line in lines]
    assert "shutdown requested" in messages
    assert messages[-1] == "stopped"
    assert all({"ts", "level", "logger", "msg"} <= set(line) for line in lines)


def test_acknowledged_write_survives_sigterm_restart(tmp_path: Path) -> None:
    first = Server(tmp_path / "data", tmp_path / "first.log")
    response = httpx.post(
        first.base + "/v1/admin/channel-target",
        json={"channel": "stable", "version": "9.9.9"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert response.status_code == 200
    assert first.terminate() == 0
    second = Server(tmp_path / "data", tmp_path / "second.log")
    try:
        got = httpx.get(
            second.base + "/v1/admin/channel-target",
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert got.json() == {"stable": "9.9.9"}
    finally:
        assert second.terminate() == 0


def test_serve_stop_hands_the_local_agents_jobs_back(tmp_path: Path) -> None:
    """A server stop drains its in-process agent at once: the running job is requeued
    (naming the node's shutdown), not cancelled, and is still there for the next start."""
    auth = {"Authorization": f"Bearer {ADMIN}"}
    first = Server(tmp_path / "data", tmp_path / "first.log", RUNPLANE_LOCAL_AGENT="1")
    submitted = httpx.post(
        first.base + "/v1/jobs", json={"stack": "shell", "command": ["sleep", "600"]}, headers=auth
    )
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["job_id"]
    deadline = time.monotonic() + 30
    while httpx.get(f"{first.base}/v1/jobs/{job_id}", headers=auth).json()["phase"] != "running":
        assert time.monotonic() < deadline, "the local agent did not run the job"
        time.sleep(0.05)
    assert first.terminate() == 0
    second = Server(tmp_path / "data", tmp_path / "second.log")  # no local agent
    try:
        view = httpx.get(f"{second.base}/v1/jobs/{job_id}", headers=auth).json()
        assert view["phase"] == "queued" and view["attempts"] == 1, view
        assert view["error"].endswith("shut down (agent drained; requeued)")
    finally:
        assert second.terminate() == 0
    # the next start with its local agent runs it again: a graceful stop lost nothing
    third = Server(tmp_path / "data", tmp_path / "third.log", RUNPLANE_LOCAL_AGENT="1")
    try:
        deadline = time.monotonic() + 30
        while (view := httpx.get(f"{third.base}/v1/jobs/{job_id}", headers=auth).json())[
            "phase"
        ] != "running":
            assert time.monotonic() < deadline, f"the requeued job did not run again: {view}"
            time.sleep(0.05)
        assert view["attempt"] == 2 and view["attempts"] == 1, view
    finally:
        assert third.terminate() == 0


def test_one_command_tree_lists_server_agent_and_client_verbs() -> None:
    helped = subprocess.run(
        [sys.executable, "-m", "runplane", "--help"], capture_output=True, text=True, timeout=30
    )
    assert helped.returncode == 0
    options, _, commands = helped.stdout.partition("Options:")[2].partition("Commands:")
    listed = {line.split()[0] for line in commands.splitlines() if line.strip()}
    assert listed == set(cli.commands), helped.stdout  # every verb, server and client
    for verb in ("serve", "agent", "submit", "ls", "logs", "pipeline", "session", "whoami"):
        assert verb in listed, helped.stdout
    for option in ("--url", "--token", "-o, --output", "--version", "-h, --help"):
        assert option in options, helped.stdout
    bare = subprocess.run(
        [sys.executable, "-m", "runplane"], capture_output=True, text=True, timeout=30
    )
    assert bare.returncode == 2 and "Commands:" in bare.stdout + bare.stderr
    # global options before the verb, a usage error of a server command: exit 2
    wrong = subprocess.run(
        [sys.executable, "-m", "runplane", "--url", "http://x", "serve", "--port", "x"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert wrong.returncode == 2
    assert "Invalid value for '--port'" in wrong.stderr


# -- the client verbs' options ------------------------------------------------------------------

NOWHERE = "http://127.0.0.1:9"  # nothing listens there: a verb that sends a request exits 3


@pytest.fixture
def runplane(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> Callable[..., tuple[int, str, str]]:
    """``runplane ARGS...`` in this process, with no client configuration but its
    arguments: (exit status, stdout, stderr)."""
    monkeypatch.delenv("RUNPLANE_URL", raising=False)
    monkeypatch.delenv("RUNPLANE_TOKEN", raising=False)
    monkeypatch.setenv("RUNPLANE_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("NO_COLOR", "1")

    def call(*args: str) -> tuple[int, str, str]:
        try:
            code = main(list(args))
        except SystemExit as exit:  # a verb's own exit status (3: refused or unreachable)
            code = int(exit.code or 0)
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


def test_url_token_and_output_go_before_or_after_the_verb(
    server: Server, runplane: Callable[..., tuple[int, str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, err = runplane("ls", "-o", "json", "--url", server.base)
    assert code == 0 and json.loads(out) == [], err
    code, out, err = runplane("-o", "json", "--url", server.base, "ls")
    assert code == 0 and json.loads(out) == [], err
    # after the verb wins over before it, which wins over the environment
    monkeypatch.setenv("RUNPLANE_URL", NOWHERE)
    assert runplane("ls")[0] == 3
    code, out, err = runplane("--url", NOWHERE, "whoami", "--url", server.base, "-o", "json")
    assert code == 0 and json.loads(out)["kind"] == "anon", err
    code, out, err = runplane("--url", server.base, "--token", ADMIN, "-o", "json", "whoami")
    assert code == 0 and json.loads(out)["kind"] != "anon", err
    code, out, err = runplane("whoami", "--token", ADMIN, "--url", server.base, "-o", "json")
    assert code == 0 and json.loads(out)["kind"] != "anon", err
    code, out, err = runplane("-o", "json", "whoami", "-o", "text", "--url", server.base)
    assert code == 0 and out.startswith("anon "), err  # the verb's own -o wins
    assert runplane("--url", server.base, "ls", "--url", NOWHERE)[0] == 3
    # the verbs of pipeline and session, and those groups themselves, take them too
    code, out, err = runplane("session", "ls", "--url", server.base, "-o", "json")
    assert code == 0 and json.loads(out) == [], err
    code, out, err = runplane("-o", "json", "session", "--url", server.base, "ls")
    assert code == 0 and json.loads(out) == [], err


def test_submit_passes_the_command_after_the_double_dash_on_whole(
    server: Server, runplane: Callable[..., tuple[int, str, str]]
) -> None:
    code, out, err = runplane(
        "submit", "shell", "--url", server.base, "-o", "json", "--", "echo", "--gpus", "--", "x"
    )
    assert code == 0, err
    job = json.loads(out)
    assert job["stack"] == "shell" and job["spec"]["command"] == ["echo", "--gpus", "--", "x"]


def test_submit_asks_for_preemption(
    server: Server, runplane: Callable[..., tuple[int, str, str]]
) -> None:
    args = ("submit", "shell", "--url", server.base, "-o", "json")
    code, out, err = runplane(*args, "--preemptible", "--preempt-grace-sec", "7", "--", "true")
    assert code == 0, err
    spec = json.loads(out)["spec"]
    assert (spec["preemptible"], spec["preempt_grace_sec"]) == (True, 7)
    code, out, err = runplane(*args, "--", "true")  # the policy's default: off
    assert code == 0 and json.loads(out)["spec"]["preemptible"] is False, err


def test_submit_asks_for_a_gang(
    server: Server, runplane: Callable[..., tuple[int, str, str]]
) -> None:
    args = ("submit", "shell", "--url", server.base, "-o", "json")
    code, out, err = runplane(*args, "--nodes", "3", "--", "true")
    assert code == 0, err
    job = json.loads(out)
    assert job["nodes"] == 3 and job["ranks"] == []  # queued: no ranks placed yet
    code, out, err = runplane(*args, "--nodes", "65", "--", "true")
    assert code == 2 and "65" in err


def test_an_unknown_option_is_a_usage_error_before_any_request(
    runplane: Callable[..., tuple[int, str, str]],
) -> None:
    code, _, err = runplane("--url", NOWHERE, "submit", "--gpus", "1", "shell")
    assert code == 2, err  # 3 would be the unreachable server: nothing was sent
    assert "No such option '--gpus'. Did you mean '--gpu'?" in err, err
    for args in (("ls", "--bogus"), ("submit", "shell", "--gpus", "1"), ("get", "-x", "job_1")):
        code, _, err = runplane("--url", NOWHERE, *args)
        assert code == 2 and "No such option" in err, (args, err)
    code, _, err = runplane("--url", NOWHERE, "session", "ls", "--bogus")
    assert code == 2 and "No such option '--bogus'." in err, err
    code, _, err = runplane("--urll", NOWHERE, "ls")
    assert code == 2 and "No such option '--urll'. Did you mean '--url'?" in err, err
    code, _, err = runplane("serve", "--url", NOWHERE)  # serve takes no client option
    assert code == 2 and "No such option '--url'." in err, err


def test_an_unknown_verb_suggests_the_nearest_of_every_verb(
    runplane: Callable[..., tuple[int, str, str]],
) -> None:
    for typo, meant in (
        ("sumbit", "submit"),
        ("nodez", "nodes"),
        ("whoamii", "whoami"),
        ("serv", "serve"),
        ("agnet", "agent"),  # "get" is close too: the nearest one is named
        ("lgs", "logs"),
        ("sesion", "session"),
    ):
        code, _, err = runplane("--url", NOWHERE, typo, "x")
        assert code == 2, err
        assert f"No such command '{typo}'. Did you mean '{meant}'?" in err, err
    code, _, err = runplane("session", "stpo", "ses_1")
    assert code == 2 and "No such command 'stpo'. Did you mean 'stop'?" in err, err
    code, _, err = runplane("xyzzy")
    assert code == 2 and "No such command 'xyzzy'." in err and "Did you mean" not in err
    code, out, _ = runplane("ls", "--help")
    assert code == 0 and all(o in out for o in ("--url", "--token", "-o, --output"))
