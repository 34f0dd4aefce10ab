"""``python -m bench``: run one benchmark scenario, or all of them.

    python -m bench all [--quick]             # every scenario, one JSON line each
    python -m bench SCENARIO [--quick] [...]   # one scenario (its own flags pass through)

Scenarios: submit, lean_submit, batch_submit, scale, lifecycle, placement, fanout, agents, store,
local_lifecycle, admission, teleop_rtt, stream_fanout, pipeline, sessions, analytics,
webhooks, retries, schedules, ha, containers, preemption, placement_gangs, and the soak
chaos (``python -m bench chaos --minutes N``, 30 by default; ``--quick`` about 2 minutes),
and the side-by-side peers (``python -m bench peers [--quick]``: runplane next to Slurm
and Prefect on this machine, after ``scripts/peers-install``), which ``all`` leaves out:
run them on their own.
Each runs in its own process, starts its own server on loopback with a fresh data dir,
and prints ONE JSON object; ``all`` prints them as they finish, then a last ``summary``
line with the headline figures. ``--quick`` keeps all of them under 9 minutes on the
2-core development machine; without it they run at the issue's full sizes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from bench import common

SCENARIOS: dict[str, str] = {
    "submit": "bench.submit",
    "lean_submit": "bench.lean_submit",
    "batch_submit": "bench.batch_submit",
    "scale": "bench.scale",
    "lifecycle": "bench.lifecycle",
    "placement": "bench.placement_run",
    "fanout": "bench.fanout",
    "agents": "bench.agents",
    "store": "bench.store_run",
    "local_lifecycle": "bench.local_lifecycle",
    "admission": "bench.admission",
    "teleop_rtt": "bench.teleop_rtt",
    "stream_fanout": "bench.stream_fanout",
    "pipeline": "bench.pipeline",
    "sessions": "bench.sessions",
    "analytics": "bench.analytics",
    "webhooks": "bench.webhooks",
    "retries": "bench.retries",
    "schedules": "bench.schedules",
    "ha": "bench.ha",
    "containers": "bench.containers",
    "preemption": "bench.preemption",
    "placement_gangs": "bench.placement_gangs",
    "chaos": "bench.chaos",
    "peers": "bench.peers",
}
#: scenarios ``all`` leaves out, run on their own: soaks (for as long as they are asked
#: to), and ``peers``, which needs Slurm and Prefect installed (``scripts/peers-install``)
SOAKS = ("chaos", "peers")
#: seconds one scenario may take before ``all`` gives up on it
LIMIT_QUICK, LIMIT_FULL = 180, 1200

HEADLINES: dict[str, tuple[str, ...]] = {
    "submit": ("jobs_per_s", "latency_ms", "ceiling_rps", "ratio"),
    "lean_submit": ("jobs_per_s", "ratio", "submit_cpu_us"),
    "batch_submit": ("jobs_per_s", "latency_ms", "server_cpu_us_per_job", "sweep_1000"),
    "scale": ("ratios", "rss_per_queued_job_bytes", "retention", "targets"),
    "lifecycle": ("completed_per_s", "submit_to_running_ms", "paced_submit_to_running_ms"),
    "placement": (
        "decision_p50_us",
        "growth_100_to_10000",
        "large",
        "preempt_decision_us",
        "preempt_decisions_per_s",
    ),
    "fanout": ("delivered_lines_per_s", "latency_ms", "every_line_in_order"),
    "teleop_rtt": ("rtt", "lost", "in_order", "rate_achieved_hz"),
    "stream_fanout": ("delivered_per_s", "latency_ms", "every_chunk_in_order", "p99_ratio_stalled"),
    "pipeline": (
        "fanout_create_ms",
        "launch_overhead_solo_ms",
        "launch_overhead_chain_ms",
        "launch_overhead_fanout_ms",
        "chain_pipelines_created_per_s",
        "all_succeeded",
    ),
    "analytics": ("worst_p99_ms", "worst_p99_ratio"),
    "webhooks": ("firing_delay_ms", "deliveries"),
    "retries": ("lateness_ms", "replacement_ms", "early"),
    "schedules": ("firing_delay_ms", "fired_twice"),
    "ha": ("takeover_ms", "lost", "doubled", "targets"),
    "chaos": ("lost", "doubled", "stuck", "followers", "faults", "rss_growth_mb_per_hour", "ok"),
    "peers": ("figures", "ratios", "skipped"),
    "containers": ("targets", "pull"),
    "preemption": ("latency_ms", "targets"),
    "sessions": (
        "beyond_pod_start_ms",
        "launch_to_ready_ms",
        "keepalive_cpu_per_100_sessions",
        "batch_keepalive_cpu_per_100_sessions",
        "rss_per_session_kb",
    ),
    "agents": ("agents_connected", "rss_per_agent_kb", "idle_cpu_share"),
    "store": ("summary",),
    "local_lifecycle": (
        "completed_per_s",
        "submit_to_running_ms",
        "paced_submit_to_running_ms",
    ),
    "admission": (
        "admit_mean_us",
        "policy_overhead_us",
        "submit_jobs_per_s",
        "submit_cpu_us_per_submit",
        "submit_policy_over_no_policy",
    ),
}


def run_one(name: str, args: list[str], limit: float) -> dict[str, Any]:
    started = time.monotonic()
    try:
        out = subprocess.run(
            [sys.executable, "-m", SCENARIOS[name], *args],
            cwd=common.REPO,
            capture_output=True,
            text=True,
            timeout=limit,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"bench": name, "error": f"timed out after {limit} s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if out.returncode != 0 or not lines:
        return {
            "bench": name,
            "error": f"exit {out.returncode}",
            "stderr": out.stderr[-2000:],
            "elapsed_s": round(time.monotonic() - started, 1),
        }
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    name, rest = argv[0], argv[1:]
    if name != "all":
        if name not in SCENARIOS:
            print(f"unknown scenario {name!r}; one of: all, {', '.join(SCENARIOS)}")
            return 2
        return subprocess.call([sys.executable, "-m", SCENARIOS[name], *rest], cwd=common.REPO)
    quick = "--quick" in rest
    limit = LIMIT_QUICK if quick else LIMIT_FULL
    started = time.monotonic()
    summary: dict[str, Any] = {}
    failed = 0
    for scenario in (s for s in SCENARIOS if s not in SOAKS):
        result = run_one(scenario, ["--quick"] if quick else [], limit)
        common.emit(result)
        if "error" in result:
            failed += 1
            summary[scenario] = {"error": result["error"]}
        else:
            summary[scenario] = {k: result.get(k) for k in HEADLINES[scenario]}
            summary[scenario]["elapsed_s"] = result.get("elapsed_s")
    common.emit(
        {
            "bench": "summary",
            "quick": quick,
            "machine": common.machine(),
            "results": summary,
            "failed": failed,
            "elapsed_s": round(time.monotonic() - started, 1),
        }
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
