"""The built-in stacks' default commands really run (as the process executor runs them)."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runplane.stacks import Catalog, Stack, config_env, validate_config

pytestmark = pytest.mark.skipif(
    shutil.which("python3") is None or shutil.which("sh") is None,
    reason="needs python3 and sh on PATH",
)


def run_default(
    stack: Stack,
    workdir: Path,
    config: dict[str, Any] | None = None,
    seed: int | None = None,
    *,
    with_config_env: bool = True,
) -> subprocess.CompletedProcess[str]:
    resolved, problems = validate_config(stack, config or {})
    assert problems == []
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    if with_config_env:
        env.update(config_env(resolved))
    if seed is not None:
        env["RUNPLANE_SEED"] = str(seed)
    workdir.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        stack.default_command,
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def metrics_of(stdout: str) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("::metric ") :])
        for line in stdout.splitlines()
        if line.startswith("::metric ")
    ]


@pytest.fixture
def sim(builtin_catalog: Catalog) -> Stack:
    stack = builtin_catalog.get("sim-cartpole")
    assert stack is not None
    return stack


@pytest.mark.parametrize("name", ["shell", "python", "sim-cartpole"])
def test_default_command_succeeds(name: str, builtin_catalog: Catalog, tmp_path: Path) -> None:
    stack = builtin_catalog.get(name)
    assert stack is not None
    proc = run_default(stack, tmp_path / "work", seed=1)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    for output in stack.default_outputs:
        if not output.optional:
            assert list((tmp_path / "work").glob(output.glob)), output.glob


def test_sim_prints_metrics_and_writes_trajectory(sim: Stack, tmp_path: Path) -> None:
    proc = run_default(sim, tmp_path, {"episodes": 4, "max_steps": 50}, seed=42)
    assert proc.returncode == 0, proc.stderr
    metrics = metrics_of(proc.stdout)
    per_episode = [m for m in metrics if "step" in m]
    assert [m["step"] for m in per_episode] == [1, 2, 3, 4]
    assert all(isinstance(m["reward"], int) and 1 <= m["reward"] <= 50 for m in per_episode)
    [final] = [m for m in metrics if "step" not in m]
    assert final["mean_reward"] == pytest.approx(
        sum(m["reward"] for m in per_episode) / 4, abs=1e-3
    )
    declared = {m.key for m in sim.metrics}
    assert {k for m in metrics for k in m} - {"step"} <= declared

    with (tmp_path / "out" / "trajectory.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and set(rows[0]) == {
        "episode",
        "step",
        "x",
        "x_dot",
        "theta",
        "theta_dot",
        "action",
    }
    assert len(rows) == sum(m["reward"] for m in per_episode)
    assert {int(r["episode"]) for r in rows} == {1, 2, 3, 4}
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["rewards"] == [m["reward"] for m in per_episode]
    assert summary["seed"] == 42


def test_sim_config_reaches_the_process(sim: Stack, tmp_path: Path) -> None:
    capped = run_default(sim, tmp_path / "a", {"episodes": 2, "max_steps": 10}, seed=0)
    assert [m["reward"] for m in metrics_of(capped.stdout) if "step" in m] == [10, 10]
    rand = run_default(sim, tmp_path / "b", {"episodes": 30, "policy": "random"}, seed=0)
    controlled = run_default(sim, tmp_path / "c", {"episodes": 30}, seed=0)

    def mean(proc: subprocess.CompletedProcess[str]) -> float:
        return next(m["mean_reward"] for m in metrics_of(proc.stdout) if "mean_reward" in m)

    assert mean(rand) < mean(controlled)
    assert "policy random" in rand.stdout


def test_sim_is_deterministic_for_a_seed(sim: Stack, tmp_path: Path) -> None:
    config = {"episodes": 5, "epsilon": 0.5}
    first = run_default(sim, tmp_path / "1", config, seed=7)
    second = run_default(sim, tmp_path / "2", config, seed=7)
    other = run_default(sim, tmp_path / "3", config, seed=8)
    assert other.returncode == 0
    assert first.stdout == second.stdout
    trajectory = "out/trajectory.csv"
    assert (tmp_path / "1" / trajectory).read_bytes() == (tmp_path / "2" / trajectory).read_bytes()
    assert (tmp_path / "1" / trajectory).read_bytes() != (tmp_path / "3" / trajectory).read_bytes()


def test_sim_script_fallbacks_match_manifest_defaults(sim: Stack, tmp_path: Path) -> None:
    with_env = run_default(sim, tmp_path / "env", seed=3)
    without_env = run_default(sim, tmp_path / "bare", seed=3, with_config_env=False)
    assert with_env.stdout == without_env.stdout


def test_sim_without_seed_uses_zero(sim: Stack, tmp_path: Path) -> None:
    unset = run_default(sim, tmp_path / "unset", {"episodes": 2})
    zero = run_default(sim, tmp_path / "zero", {"episodes": 2}, seed=0)
    assert unset.stdout == zero.stdout


def test_shell_echoes_configured_message(builtin_catalog: Catalog, tmp_path: Path) -> None:
    shell = builtin_catalog.get("shell")
    assert shell is not None
    proc = run_default(shell, tmp_path, {"message": "it's $HOME; ok", "repeat": 3})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:3] == ["it's $HOME; ok"] * 3


def test_python_runs_the_workspace_entrypoint(builtin_catalog: Catalog, tmp_path: Path) -> None:
    python = builtin_catalog.get("python")
    assert python is not None
    (tmp_path / "train.py").write_text(
        'import os\nprint(\'::metric {"step": 1, "loss": 0.5}\')\n'
        "print('unbuffered', os.environ.get('PYTHONUNBUFFERED'))\n"
    )
    proc = run_default(python, tmp_path, {"entrypoint": "train.py"})
    assert proc.returncode == 0, proc.stderr
    assert metrics_of(proc.stdout) == [{"step": 1, "loss": 0.5}]
    assert "unbuffered 1" in proc.stdout
    missing = run_default(python, tmp_path / "empty", {"unbuffered": False})
    assert missing.returncode == 0
    assert "no main.py" in missing.stdout
