"""Where the client finds its server and token (docs/cli.md): arguments, then the
environment, then the config file, then the default; and the exit status --follow gives
each way a job ends."""

from __future__ import annotations

from pathlib import Path

import pytest

from runplane.client.cli import exit_status
from runplane.client.config import DEFAULT_URL, ClientConfig


def test_arguments_then_environment_then_file_then_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RUNPLANE_URL", raising=False)
    monkeypatch.delenv("RUNPLANE_TOKEN", raising=False)
    monkeypatch.setenv("RUNPLANE_CONFIG", str(tmp_path / "none.toml"))
    assert ClientConfig.load() == ClientConfig(DEFAULT_URL, None)
    file = tmp_path / "config.toml"
    file.write_text('url = "http://file:1/"\ntoken = "from-file"\n')
    monkeypatch.setenv("RUNPLANE_CONFIG", str(file))
    assert ClientConfig.load() == ClientConfig("http://file:1", "from-file")
    monkeypatch.setenv("RUNPLANE_URL", "http://env:2")
    assert ClientConfig.load() == ClientConfig("http://env:2", "from-file")
    monkeypatch.setenv("RUNPLANE_TOKEN", "from-env")
    assert ClientConfig.load("http://arg:3", None) == ClientConfig("http://arg:3", "from-env")
    assert ClientConfig.load(None, "from-arg").token == "from-arg"


def test_follow_exits_with_the_job_status() -> None:
    assert exit_status({"phase": "succeeded", "exit_code": 0}) == 0
    assert exit_status({"phase": "failed", "exit_code": 7}) == 7
    assert exit_status({"phase": "failed", "exit_code": None}) == 1
    assert exit_status({"phase": "failed", "exit_code": 300}) == 1
    assert exit_status({"phase": "timeout"}) == 124
    assert exit_status({"phase": "cancelled"}) == 130
