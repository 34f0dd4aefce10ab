"""What the CLI says (issue 40 item 9; docs/cli.md "Output and exit statuses"), from
``python -m runplane`` processes against a served ``runplane serve`` with its local agent:
``cancel`` of a job that already ended says nothing was cancelled (exit 0); a ``next:``
line never restates the error; a long message is one line whatever the width (no
``COLUMNS``, not a terminal); a pair option's error names its own form; the attempt's
system line names the node once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest

from runplane.client.api import ApiError
from tests.test_cli import Server

NOWHERE = "http://127.0.0.1:9"


def runplane(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``runplane ARGS`` as a process with no terminal and no COLUMNS."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    env.pop("COLUMNS", None)
    env.update(RUNPLANE_URL=url, RUNPLANE_CONFIG=os.devnull, NO_COLOR="1")
    return subprocess.run(
        [sys.executable, "-m", "runplane", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    top = tmp_path_factory.mktemp("messages")
    server = Server(top / "data", top / "server.log", RUNPLANE_LOCAL_AGENT="1")
    yield server.base
    assert server.terminate() == 0


def test_cancel_of_an_ended_job_says_there_was_nothing_to_cancel(served: str) -> None:
    ran = runplane(served, "submit", "-f", "-o", "json", "shell", "--", "true")
    assert ran.returncode == 0, ran.stderr
    job_id = json.loads(ran.stdout)["job_id"]
    again = runplane(served, "cancel", job_id)
    assert again.returncode == 0
    assert again.stdout == ""
    assert again.stderr == f"{job_id} already succeeded: nothing to cancel\n"
    as_json = json.loads(runplane(served, "cancel", job_id, "-o", "json").stdout)
    assert (as_json["cancelled"], as_json["phase"]) == (False, "succeeded")
    # the attempt's system line names its node once
    system = runplane(served, "logs", job_id).stdout.splitlines()
    (attempt,) = [line for line in system if line.startswith("attempt 1 ")]
    assert attempt.startswith("attempt 1 on node_") and "on node node_" not in attempt


def test_next_never_restates_the_error(served: str) -> None:
    out_of_range = runplane(served, "submit", "sim-cartpole", "--config", "episodes=0")
    assert out_of_range.returncode == 3
    error, next_ = out_of_range.stderr.splitlines()
    assert error.startswith("error: episodes: 0 is below the minimum 1")
    assert next_.startswith("next: ") and "below the minimum" not in next_
    assert "`runplane stacks show sim-cartpole` lists the stack's config fields" in next_
    unknown = runplane(served, "submit", "nope")
    assert unknown.returncode == 3
    error, next_ = unknown.stderr.splitlines()
    assert "unknown stack 'nope'" in error
    assert next_ == "next: `runplane stacks` lists the catalog"


def test_a_hint_adds_only_what_the_detail_does_not_say() -> None:
    said = "cron: a cron expression has 5 fields"
    one = ApiError(422, said, {"errors": [{"key": "cron", "message": "a cron expression"}]})
    assert one.hint() == ""  # nothing to add: no next line at all
    two = ApiError(
        400,
        "limits.cpu_cores: too small",
        {
            "errors": [
                {"key": "limits.cpu_cores", "message": "limits.cpu_cores: too small"},
                {"key": "config.episodes", "message": "episodes: 0 is below the minimum 1"},
            ]
        },
        sent={"stack": "sim-cartpole"},
    )
    assert two.hint() == (
        "config.episodes: episodes: 0 is below the minimum 1; `runplane stacks show "
        "sim-cartpole` lists the stack's config fields, their types and ranges"
    )


def test_a_long_error_is_one_line_at_any_width(served: str) -> None:
    typo = runplane(served, "submit", "sim-cartpole", "--config", "episods=3")
    assert typo.returncode == 3
    lines = typo.stderr.splitlines()
    assert len(lines) == 2, lines  # the error and its next step, neither wrapped
    assert lines[0].startswith("error: unknown config key 'episods' for stack 'sim-cartpole'")
    assert lines[0].endswith("(did you mean 'episodes'?)") and len(lines[0]) > 80


@pytest.mark.parametrize(
    ("option", "form"),
    [
        ("--output", "ARTIFACT=GLOB"),
        ("--input", "PATH=REF"),
        ("--config", "KEY=VALUE"),
        ("--env", "KEY=VALUE"),
        ("--sweep", "KEY=V1,V2,..."),
    ],
)
def test_a_pair_option_names_its_own_form(option: str, form: str) -> None:
    refused = runplane(NOWHERE, "submit", "shell", option, "foo")
    assert refused.returncode == 2  # a usage error, before any request
    assert f"'foo' is not {form}" in refused.stderr
