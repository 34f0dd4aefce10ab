"""Slurm's figures for ``bench peers``: ``sbatch`` acceptance and trivial-job lifecycle.

Needs a running Slurm on this machine with the partitions ``scripts/peers-install``
writes (``plain``: one job per CPU; ``over``: OverSubscribe=FORCE, 64 jobs at once).

* acceptance: C threads each running ``sbatch --hold --wrap true`` back to back for S
  seconds (held: nothing runs, as runplane's submit runs with no node): accepted/s;
  the held jobs are cancelled after.
* lifecycle: N ``sbatch --wrap true`` jobs on one partition from C threads, as fast as
  they are taken; completed jobs/s from the first submit to the moment ``squeue -t all``
  shows all N ended (polled every 0.1 s), and how many ended COMPLETED.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from typing import Any

PARTITIONS = ("plain", "over")
FIX = "run scripts/peers-install (as root)"
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL"}


def missing() -> str | None:
    """Why Slurm cannot be measured here, or None when it can."""
    for tool in ("sbatch", "squeue", "sinfo", "scancel"):
        if shutil.which(tool) is None:
            return f"{tool} not found: {FIX}"
    try:
        out = subprocess.run(
            ["sinfo", "-h", "-o", "%R %T"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"sinfo failed: {exc}"
    if out.returncode != 0:
        return f"slurmctld not answering (sinfo: {out.stderr.strip()[:200]}): {FIX}"
    states = dict(line.split()[:2] for line in out.stdout.splitlines() if len(line.split()) >= 2)
    for part in PARTITIONS:
        if part not in states:
            return f"partition {part!r} missing (sinfo: {out.stdout.strip()!r}): {FIX}"
        if states[part] not in ("idle", "mixed", "allocated", "completing"):
            return f"partition {part!r} node is {states[part]}: {FIX}"
    return None


def sbatch(partition: str, name: str, *, hold: bool = False) -> bool:
    argv = ["sbatch", "--parsable", "-p", partition, "-J", name, "-o", "/dev/null"]
    if hold:
        argv.append("--hold")
    argv += ["--wrap", "true"]
    try:
        out = subprocess.run(argv, capture_output=True, timeout=60, check=False)
    except subprocess.TimeoutExpired:
        return False
    return out.returncode == 0


def _submitters(threads: int, work: Any) -> list[threading.Thread]:
    started = [threading.Thread(target=work, daemon=True) for _ in range(threads)]
    for t in started:
        t.start()
    return started


def states(name: str) -> list[str]:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-n", name, "-o", "%T"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    return out.stdout.split()


def cancel(name: str, limit: float = 60.0) -> None:
    subprocess.run(["scancel", "-n", name], capture_output=True, timeout=60, check=False)
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and any(s not in ENDED for s in states(name)):
        time.sleep(0.2)


def acceptance(seconds: float, threads: int) -> dict[str, Any]:
    """``sbatch --hold`` back to back from ``threads`` threads for ``seconds``."""
    name = f"rp-peers-accept-{int(time.time())}"
    counts = {"ok": 0, "failed": 0}
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def work() -> None:
        while time.monotonic() < stop_at:
            ok = sbatch("plain", name, hold=True)
            with lock:
                counts["ok" if ok else "failed"] += 1

    t0 = time.monotonic()
    for t in _submitters(threads, work):
        t.join()
    elapsed = time.monotonic() - t0
    cancel(name)
    return {
        "accepted": counts["ok"],
        "failed": counts["failed"],
        "seconds": round(elapsed, 2),
        "submits_per_s": round(counts["ok"] / elapsed, 1),
        "threads": threads,
    }


def lifecycle(partition: str, n: int, threads: int, limit: float) -> dict[str, Any]:
    """N ``true`` jobs on ``partition``: completed jobs/s, first submit -> all ended."""
    name = f"rp-peers-life-{partition}-{int(time.time())}"
    left = [n]
    counts = {"ok": 0, "failed": 0}
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            ok = sbatch(partition, name)
            with lock:
                counts["ok" if ok else "failed"] += 1

    t0 = time.monotonic()
    submitters = _submitters(threads, work)
    deadline = t0 + limit
    seen: list[str] = []
    while time.monotonic() < deadline:
        seen = states(name)
        submitting = any(t.is_alive() for t in submitters)
        if not submitting and len(seen) >= counts["ok"] and all(s in ENDED for s in seen):
            break
        time.sleep(0.1)
    elapsed = time.monotonic() - t0
    ended = sum(s in ENDED for s in seen)
    cancel(name)
    return {
        "partition": partition,
        "jobs": n,
        "submitted": counts["ok"],
        "submit_failed": counts["failed"],
        "ended": ended,
        "completed": seen.count("COMPLETED"),
        "seconds": round(elapsed, 2),
        "completed_per_s": round(seen.count("COMPLETED") / elapsed, 2) if elapsed else None,
        "timed_out": ended < counts["ok"],
    }


def version() -> str:
    out = subprocess.run(["sbatch", "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip()
