"""``scripts/peers-install`` and ``python -m bench peers`` without Slurm or Prefect.

- the script parses (``bash -n``), answers ``--help`` as any user, refuses an unknown
  option, and ``--print-conf`` prints the localhost slurm.conf: one node with this
  machine's cores, a ``plain`` partition (one job per CPU) and an ``over`` one with room
  for at least 64 jobs at once;
- ``bench peers`` is a scenario that ``all`` leaves out, and with neither peer reachable it
  still prints ONE JSON object: each peer skipped with its reason, no figures, no ratios;
- the ratios are runplane's figure over the peer's, like for like.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from bench import __main__ as bench_main
from bench import peers

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "peers-install"


def run(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(argv), capture_output=True, text=True, timeout=120, env=env, check=False
    )


def test_peers_install_parses_and_answers_help_without_installing() -> None:
    assert run("bash", "-n", str(SCRIPT)).returncode == 0
    helped = run(str(SCRIPT), "--help")
    assert helped.returncode == 0, helped.stderr
    assert "slurm-wlm" in helped.stdout and "prefect-venv" in helped.stdout
    assert "set -euo" not in helped.stdout  # the comment block only
    bad = run(str(SCRIPT), "--bogus")
    assert bad.returncode == 2


def test_peers_install_prints_a_one_node_conf_with_both_profiles() -> None:
    done = run(str(SCRIPT), "--print-conf")
    assert done.returncode == 0, done.stderr
    conf = done.stdout
    cores = os.cpu_count() or 1
    [node] = re.findall(r"^NodeName=(\S+) NodeAddr=127\.0\.0\.1 CPUs=(\d+) ", conf, re.M)
    assert int(node[1]) == cores
    parts = dict(re.findall(r"^PartitionName=(\S+) (.*)$", conf, re.M))
    assert set(parts) == {"plain", "over"}  # not "default": Slurm reads that as defaults
    assert "Default=YES" in parts["plain"] and "OverSubscribe=NO" in parts["plain"]
    [per_cpu] = re.findall(r"OverSubscribe=FORCE:(\d+)", parts["over"])
    assert int(per_cpu) * cores >= 64
    assert "SelectTypeParameters=CR_CPU" in conf


def test_peers_is_a_scenario_all_leaves_out() -> None:
    assert bench_main.SCENARIOS["peers"] == "bench.peers"
    assert "peers" in bench_main.SOAKS
    assert bench_main.HEADLINES["peers"] == ("figures", "ratios", "skipped")


def test_bench_peers_skips_each_peer_that_is_not_there_with_its_reason(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PEERS_")}
    env["PATH"] = str(tmp_path)  # no sbatch, no sinfo
    env["PEERS_PREFECT_VENV"] = str(tmp_path / "no-venv")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-m", "bench", "peers", "--quick", "--skip", "runplane"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    [line] = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    result = json.loads(line)
    assert result["bench"] == "peers"
    skipped = result["skipped"]
    assert skipped["runplane"] == "--skip"
    assert "sbatch not found" in skipped["slurm"] and "peers-install" in skipped["slurm"]
    assert "no-venv" in skipped["prefect"] and "peers-install" in skipped["prefect"]
    assert "slurm" not in result and "prefect" not in result
    assert set(result["figures"].values()) == {None}
    assert set(result["ratios"].values()) == {None}


def test_ratios_are_runplane_over_the_peer_like_for_like() -> None:
    result = {
        "runplane": {
            "submit": {"jobs_per_s": 400.0},
            "lifecycle_default": {"completed_per_s": 40.0},
            "lifecycle_64": {"completed_per_s": 60.0},
        },
        "slurm": {
            "sbatch": {"submits_per_s": 200.0},
            "lifecycle_plain": {"completed_per_s": 0.8},
            "lifecycle_over": {"completed_per_s": 50.0},
        },
        "prefect": {"creation": {"created_per_s": 20.0}, "end_to_end": {"error": "x"}},
    }
    figures = peers.figures(result)
    assert figures["slurm_completed_per_s_over_64"] == 50.0
    assert figures["prefect_flow_runs_completed_per_s"] is None
    assert peers.ratios(figures) == {
        "submit_over_sbatch": 2.0,
        "submit_over_prefect_create": 20.0,
        "default_slots_over_slurm_plain": 50.0,
        "slots_64_over_slurm_over_64": 1.2,
        "default_slots_over_prefect_runs": None,
    }
