"""peers: runplane next to Slurm and Prefect, measured in ONE run on the same machine.

    python -m bench peers [--quick] [--skip slurm|prefect|runplane ...]

Not in ``all``: it needs the peers installed and running (``scripts/peers-install``, as
root); a peer that is not is skipped, with the reason in the JSON (``skipped``).

* runplane: ``bench.submit`` (durable ``POST /v1/jobs`` at 50 connections, no node: jobs
  accepted/s) and ``bench.local_lifecycle`` (``true`` jobs completed/s through the
  server's in-process agent) with its default slots and with ``--slots 64``;
* Slurm (``bench.peers_slurm``): ``sbatch --hold`` accepted/s from 8 threads, and ``true``
  jobs completed/s on the ``plain`` partition (one job per CPU) and on ``over`` (64 at
  once, OverSubscribe=FORCE);
* Prefect (``bench.peers_prefect``): raw flow-run creations/s from 10 threads and
  flow runs completed/s end to end through a served flow (Prefect's local runner).

``ratios``: runplane's figure over the peer's, like for like (submit over ``sbatch`` and
over flow-run creation; default slots over Slurm's ``plain`` and over Prefect's runs; 64
slots over Slurm's ``over``). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import subprocess
import time
from typing import Any

from bench import common, peers_prefect, peers_slurm

#: sizes: quick / full
SIZES: dict[str, dict[str, Any]] = {
    "quick": {
        "sbatch_seconds": 5.0,
        "threads": 8,
        "slurm_plain_jobs": 30,
        "slurm_over_jobs": 300,
        "prefect_create_seconds": 5.0,
        "prefect_connections": 10,
        "prefect_runs": 10,
    },
    "full": {
        "sbatch_seconds": 10.0,
        "threads": 8,
        "slurm_plain_jobs": 100,
        "slurm_over_jobs": 2000,
        "prefect_create_seconds": 10.0,
        "prefect_connections": 10,
        "prefect_runs": 30,
    },
}
PEERS = ("runplane", "slurm", "prefect")


def runplane(quick: bool) -> dict[str, Any]:
    flag = ["--quick"] if quick else []
    out: dict[str, Any] = {}
    runs = {
        "submit": ["bench.submit", *flag],
        "lifecycle_default": ["bench.local_lifecycle", *flag],
        "lifecycle_64": ["bench.local_lifecycle", *flag, "--slots", "64"],
    }
    for key, argv in runs.items():
        try:
            res = common.run_json(argv, timeout=1200)
        except (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired) as exc:
            out[key] = {"error": str(exc)[-2000:]}
            continue
        if key == "submit":
            out[key] = {
                "jobs_per_s": res["jobs_per_s"],
                "latency_ms": res["latency_ms"],
                "healthz_rps": res["ceiling_rps"]["healthz"],
                "submit_over_healthz": res["ratio"]["submit_over_healthz"],
                "loadavg_before": res["machine"]["loadavg_before"],
            }
        else:
            out[key] = {
                "completed_per_s": res["completed_per_s"],
                "jobs": res["settings"]["jobs"],
                "slots": res["settings"]["agent_slots"],
                "cores_offered": res["settings"]["agent_cores"],
                "terminal": res["terminal"],
                "server_cpu_share": res["server_cpu_share"],
                "loadavg_before": res["machine"]["loadavg_before"],
            }
    return out


def slurm(size: dict[str, Any]) -> dict[str, Any]:
    threads = size["threads"]
    plain, over = size["slurm_plain_jobs"], size["slurm_over_jobs"]
    return {
        "version": peers_slurm.version(),
        "sbatch": peers_slurm.acceptance(size["sbatch_seconds"], threads),
        "lifecycle_plain": peers_slurm.lifecycle("plain", plain, threads, 120 + plain * 5),
        "lifecycle_over": peers_slurm.lifecycle("over", over, threads, 120 + over),
    }


def prefect(size: dict[str, Any]) -> dict[str, Any]:
    runs = size["prefect_runs"]
    return peers_prefect.measure(
        seconds=size["prefect_create_seconds"],
        connections=size["prefect_connections"],
        runs=runs,
        limit=60 + runs * 10,
    )


def _get(d: dict[str, Any], *path: str) -> float | None:
    for key in path:
        if not isinstance(d, dict) or key not in d:
            return None
        d = d[key]
    return d if isinstance(d, int | float) else None


def figures(result: dict[str, Any]) -> dict[str, float | None]:
    """The headline figures, one per line of the side-by-side table."""
    rp, sl, pf = (result.get(k, {}) for k in PEERS)
    return {
        "runplane_submits_per_s": _get(rp, "submit", "jobs_per_s"),
        "runplane_completed_per_s_default_slots": _get(rp, "lifecycle_default", "completed_per_s"),
        "runplane_completed_per_s_64_slots": _get(rp, "lifecycle_64", "completed_per_s"),
        "slurm_sbatch_per_s": _get(sl, "sbatch", "submits_per_s"),
        "slurm_completed_per_s_plain": _get(sl, "lifecycle_plain", "completed_per_s"),
        "slurm_completed_per_s_over_64": _get(sl, "lifecycle_over", "completed_per_s"),
        "prefect_flow_runs_created_per_s": _get(pf, "creation", "created_per_s"),
        "prefect_flow_runs_completed_per_s": _get(pf, "end_to_end", "completed_per_s"),
    }


def ratios(f: dict[str, float | None]) -> dict[str, float | None]:
    """runplane / peer, like for like."""
    return {
        "submit_over_sbatch": common.ratio(f["runplane_submits_per_s"], f["slurm_sbatch_per_s"]),
        "submit_over_prefect_create": common.ratio(
            f["runplane_submits_per_s"], f["prefect_flow_runs_created_per_s"]
        ),
        "default_slots_over_slurm_plain": common.ratio(
            f["runplane_completed_per_s_default_slots"], f["slurm_completed_per_s_plain"]
        ),
        "slots_64_over_slurm_over_64": common.ratio(
            f["runplane_completed_per_s_64_slots"], f["slurm_completed_per_s_over_64"]
        ),
        "default_slots_over_prefect_runs": common.ratio(
            f["runplane_completed_per_s_default_slots"], f["prefect_flow_runs_completed_per_s"]
        ),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about 6 minutes)")
    parser.add_argument("--skip", action="append", choices=PEERS, default=[])
    args = parser.parse_args(argv)
    size = SIZES["quick" if args.quick else "full"]
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "peers",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {**size, "quick": args.quick},
    }
    skipped: dict[str, str] = {p: "--skip" for p in args.skip}
    checks = {"slurm": peers_slurm.missing, "prefect": peers_prefect.missing}
    for peer, check in checks.items():
        reason = None if peer in skipped else check()
        if reason:
            skipped[peer] = reason
    steps = {"runplane": lambda: runplane(args.quick), "slurm": lambda: slurm(size)}
    steps["prefect"] = lambda: prefect(size)
    for peer, step in steps.items():
        if peer in skipped:
            continue
        load = common.loadavg()
        try:
            result[peer] = {"loadavg_before": load, **step()}
        except (RuntimeError, OSError, ValueError, KeyError, subprocess.SubprocessError) as exc:
            result[peer] = {"error": f"{type(exc).__name__}: {str(exc)[-2000:]}"}
    result["skipped"] = skipped
    result["figures"] = figures(result)
    result["ratios"] = ratios(result["figures"])
    f = result["figures"]
    result["targets"] = {
        "64 slots above slurm's oversubscribed": (
            None
            if f["slurm_completed_per_s_over_64"] is None
            else (f["runplane_completed_per_s_64_slots"] or 0) > f["slurm_completed_per_s_over_64"]
        ),
    }
    return common.finish(result, started)


if __name__ == "__main__":
    main()
