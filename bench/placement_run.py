"""placement: decision time per job at 100 to 100,000 nodes of mixed shapes.

    python -m bench placement [--quick]

Runs ``bench/placement.py`` (the planner benchmark: pure placement code, no server; see
its docstring for the job mix and the steady-state loads) in its own process and adds
the machine, the settings and a summary: median and p99 decision time per size, and how
it grows from 100 to 10,000 nodes (x100 nodes). Target: < 1 ms median at 10,000 nodes,
growing sub-linearly. Also the preemption decision on a fleet full of preemptible jobs
(``preempt_10000``: ``runplane.placement.preempt.choose`` per waiting high-priority job,
and the actor's plan with preemption; ``bench/placement_preempt.py``): target p99 < 2 ms
(the issue states it for a queue with 1 % gang jobs; gangs are not built, so it is held
against preemption decisions alone). At 100,000 nodes (plain, and owned by 100 orgs
with 500 grants; ``--quick``: fewer decisions there and no owned 100,000, said in
``settings``) and on the owned 10,000: p50/p99 decision time and sustained decisions
per second, held against issue 42's targets (p99 < 1 ms at 100,000 plain and at 10,000
owned, >= 5,000 decisions/s sustained) as ``value / target`` ratios. Prints ONE JSON
object.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench import common


def _choose(raw: dict[str, Any], nodes: str) -> dict[str, Any]:
    """p50/p99 of ``choose`` on the full fleet of ``nodes`` nodes (None: not run)."""
    got = (raw.get(f"preempt_{nodes}") or {}).get("choose") or {}
    return {k: got.get(k) for k in ("p50_us", "p99_us")}


#: issue 42's placement targets: p99 decision time (us) and sustained decisions/s
P99_TARGET_US, RATE_TARGET = 1000, 5000


def _large(raw: dict[str, Any]) -> dict[str, Any]:
    """p50/p99/decisions per s on the owned 10,000 and the 100,000-node fleets run."""
    out: dict[str, Any] = {}
    for key in ("owned_10000", "100000", "owned_100000"):
        got = raw.get(key)
        if got:
            out[key] = {
                "p50_us": got["decision"]["p50_us"],
                "p99_us": got["decision"]["p99_us"],
                "decisions": got["decision"]["n"],
                "build_ms": got["build_ms"],
                "decisions_per_s": (got.get("sustained") or {}).get("decisions_per_s"),
            }
    return out


def _targets(large: dict[str, Any]) -> dict[str, Any]:
    """Each target met or missed, with the ratio of the figure to it (below 1 is met for
    a time, at least 1 for a rate); a fleet not run reports None."""

    def below(value: float | None, target: float) -> dict[str, Any]:
        ratio = None if value is None else round(value / target, 3)
        return {
            "value": value,
            "target": target,
            "ratio": ratio,
            "met": ratio is not None and ratio < 1,
        }

    def above(value: float | None, target: float) -> dict[str, Any]:
        ratio = None if value is None else round(value / target, 3)
        return {
            "value": value,
            "target": target,
            "ratio": ratio,
            "met": ratio is not None and ratio >= 1,
        }

    def get(key: str, field: str) -> Any:
        return (large.get(key) or {}).get(field)

    return {
        "p99 at 100000 nodes < 1 ms (us)": below(get("100000", "p99_us"), P99_TARGET_US),
        "p99 at 10000 owned nodes < 1 ms (us)": below(get("owned_10000", "p99_us"), P99_TARGET_US),
        "p99 at 100000 owned nodes < 1 ms (us)": below(
            get("owned_100000", "p99_us"), P99_TARGET_US
        ),
        ">= 5000 decisions/s sustained at 100000 nodes": above(
            get("100000", "decisions_per_s"), RATE_TARGET
        ),
        ">= 5000 decisions/s sustained at 10000 owned nodes": above(
            get("owned_10000", "decisions_per_s"), RATE_TARGET
        ),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--decisions", type=int, default=None)
    args = parser.parse_args(argv)
    decisions = args.decisions or (1000 if args.quick else 3000)
    waiting = 20 if args.quick else 40
    # quick: fewer decisions at 100,000 nodes, no owned 100,000, shorter sustained runs
    large_decisions = 500 if args.quick else decisions
    sustain_s = 1.5 if args.quick else 3.0
    owned_large = not args.quick
    started = time.monotonic()
    raw = common.run_json(
        [
            "bench.placement",
            "--decisions",
            str(decisions),
            "--preempt-waiting",
            str(waiting),
            "--large-decisions",
            str(large_decisions),
            "--sustain-s",
            str(sustain_s),
            "--owned-large" if owned_large else "--no-owned-large",
        ],
        timeout=900,
    )
    sizes = raw.get("sizes", {})
    p50 = {n: s["decision"]["p50_us"] for n, s in sizes.items()}
    p99 = {n: s["decision"]["p99_us"] for n, s in sizes.items()}
    growth = raw.get("growth_ratio_100_to_10000", {})
    largest = p50.get("10000")
    preempt = raw.get("preempt_10000") or {}
    large = _large(raw)
    choose_p99 = (preempt.get("choose") or {}).get("p99_us")
    result = {
        "bench": "placement",
        "machine": common.machine(),
        "settings": {
            "decisions_per_size": decisions,
            "preempt_waiting_jobs": waiting,
            "script": "bench/placement.py",
            "decisions_at_100000": large_decisions,
            "owned_100000": owned_large,
            "sustained_s": sustain_s,
            "quick": args.quick,
        },
        "decision_p50_us": p50,
        "decision_p99_us": p99,
        "growth_100_to_10000": growth,
        "large": large,
        "preempt_decision_us": {n: _choose(raw, n) for n in ("1000", "10000")},
        "preempt_decisions_per_s": preempt.get("decisions_per_s"),
        "preempt_actor_plan_ms": (preempt.get("actor_plan") or {}).get("plan_and_preempt_ms"),
        "targets": {
            "p50 at 10000 nodes < 1 ms": largest is not None and largest < 1000,
            "sub-linear growth": bool(growth) and growth.get("p50", 1e9) < growth.get("nodes", 0),
            "preemption decision p99 at 10000 full nodes < 2 ms": {
                "value_us": choose_p99,
                "target_us": 2000,
                "met": choose_p99 is not None and choose_p99 < 2000,
            },
            **_targets(large),
        },
        "placement": raw,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    common.emit(result)
    return result


if __name__ == "__main__":
    main()
