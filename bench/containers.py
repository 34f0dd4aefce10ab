"""containers: jobs in their images (docs/containers.md) against the process executor.

    python -m bench.containers [--quick] [--runs N]

One ``runplane serve`` on loopback (SQLite) with its local agent as a container node
(``RUNPLANE_LOCAL_AGENT_EXECUTOR=container``: a real ``runplane agent`` pulling with
skopeo, unpacking with umoci, running jobs with bubblewrap or runsc), and a real registry
(Debian's ``docker-registry``) on loopback holding the test images of ``tests/oci.py``.
Jobs run one at a time (nothing queues), each ``true``; per job, from the store (unix ms):
submit to end (``finished_at - created_at``: placement, the order, the pull or the cache,
the start, the exit) and submit to running.

* ``process``: a job without an image (the node's process path), N runs;
* ``warm``: a job in a busybox image already in the node's cache, N runs;
* ``gvisor``: the same image with ``isolation: gvisor``, N runs;
* ``cold``: N jobs each in an image the node has never seen (pull + unpack + start);
* ``pull``: a Debian + python3 image (~50 MB of layers; 3 variants, each its own config
  and so its own digest) pulled by a job each, the median of the agent's
  pull (the seconds its ``pulled`` line gives: manifest checked, copy, layout checked)
  against ``skopeo copy`` alone of the same digest to a local OCI layout (the median of
  3, with the server and its agent running).

Targets (issue 38): warm adds < 50 ms p50 over process; gVisor start < 300 ms p50; the
pull at >= 0.9 of ``skopeo copy`` alone (``pull.ratio`` = skopeo seconds / pull seconds).
Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from bench import common
from tests.oci import Registry, busybox_layout, debian_python_layout

WARM_EXTRA_TARGET_MS = 50.0
GVISOR_TARGET_MS = 300.0
PULL_RATIO_TARGET = 0.9
PULLS = 3
PULLED = re.compile(r"pulled .* in ([0-9.]+) s$")
TERMINAL = ("succeeded", "failed", "timeout", "cancelled")


def run_one(client: httpx.Client, body: dict[str, Any], limit: float = 300) -> str:
    made = client.post("/v1/jobs", json={"stack": "shell", "command": ["true"], **body})
    if made.status_code != 202:
        raise RuntimeError(f"submit: {made.status_code} {made.text}")
    job_id = str(made.json()["job_id"])
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        view = client.get(f"/v1/jobs/{job_id}").json()
        if view["phase"] in TERMINAL:
            if view["phase"] != "succeeded":
                logs = client.get(f"/v1/jobs/{job_id}/logs?stream=system").json()["logs"]
                raise RuntimeError(f"{job_id} {view['phase']}: {[e['line'] for e in logs]}")
            return job_id
        time.sleep(0.003)
    raise RuntimeError(f"{job_id} did not end within {limit} s")


def job_times(db_path: Path, ids: list[str]) -> dict[str, Any]:
    with sqlite3.connect(db_path) as db:
        marks = ",".join("?" * len(ids))
        sql = f"SELECT created_at, started_at, finished_at FROM jobs WHERE id IN ({marks})"
        rows = db.execute(sql, ids).fetchall()
    return {
        "submit_to_end_ms": common.latency_summary([(f - c) / 1000 for c, _, f in rows]),
        "submit_to_running_ms": common.latency_summary([(s - c) / 1000 for c, s, _ in rows]),
        "timestamp_resolution_ms": 1,
    }


def pull_seconds(db_path: Path, job_id: str) -> float | None:
    """The agent's own measure of its pull (its ``pulled <ref>: ... in X s`` line: from
    the start of the pull to the layout checked, unpacking not included). The log lines'
    store timestamps would add the agent's log batching."""
    with sqlite3.connect(db_path) as db:
        rows = db.execute(
            "SELECT data FROM job_events WHERE job_id = ? AND kind = 'log' ORDER BY seq",
            (job_id,),
        ).fetchall()
    for (data,) in rows:
        found = PULLED.match(json.loads(data).get("line", ""))
        if found:
            return float(found.group(1))
    return None


def push_variants(registry: Registry, layout: Path, work: Path, n: int) -> list[str]:
    """``n`` images with ``layout``'s layers, each its own config (an env variable), so
    its own manifest digest: each a full pull for the node. Tags ``v0`` .. ``v<n-1>``."""
    shutil.copytree(layout, work)
    digests = []
    for i in range(n):
        subprocess.run(
            ["umoci", "config", "--image", f"{work}:img", "--tag", f"v{i}",
             "--config.env", f"RUNPLANE_BENCH_VARIANT={i}"],
            check=True, capture_output=True,
        )  # fmt: skip
        digests.append(registry.push(work, "bench/debian-python", f"v{i}", image_tag=f"v{i}"))
    return digests


def layout_bytes(layout: Path) -> int:
    return sum(p.stat().st_size for p in (layout / "blobs").rglob("*") if p.is_file())


def skopeo_alone(source: str, tries: int = 3) -> float:
    """The median of ``tries`` copies of ``source`` to a fresh OCI layout."""
    took = []
    for _ in range(tries):
        dest = Path(tempfile.mkdtemp(prefix="runplane-bench-skopeo-"))
        began = time.perf_counter()
        subprocess.run(
            ["skopeo", "copy", "--quiet", "--src-tls-verify=false", f"docker://{source}",
             f"oci:{dest / 'layout'}:img"],
            check=True, capture_output=True,
        )  # fmt: skip
        took.append(time.perf_counter() - began)
        shutil.rmtree(dest, ignore_errors=True)
    return sorted(took)[len(took) // 2]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--runs", type=int, default=None)
    args = parser.parse_args(argv)
    n = args.runs or (10 if args.quick else 30)
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="runplane-bench-containers-"))
    registry = Registry(work / "registry").start()
    result: dict[str, Any] = {
        "bench": "containers",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {"runs": n, "command": ["true"], "store": "sqlite (default)",
                     "agent": "local agent, --executor container"},
    }  # fmt: skip
    try:
        warm_ref = f"{registry.host}/bench/bb:v1"
        registry.push(busybox_layout(work / "images", "bench-warm"), "bench/bb", "v1")
        cold_refs = []
        for i in range(n):
            registry.push(
                busybox_layout(work / "images", f"bench-cold-{i}"), f"bench/cold{i}", "v1"
            )
            cold_refs.append(f"{registry.host}/bench/cold{i}:v1")
        digests = push_variants(registry, debian_python_layout(), work / "debian", PULLS)
        env = {
            "RUNPLANE_LOCAL_AGENT_EXECUTOR": "container",
            "RUNPLANE_INSECURE_REGISTRIES": registry.host,
        }
        with common.server(local_agent=True, env=env) as srv:
            with httpx.Client(base_url=srv.url, timeout=60) as client:
                run_one(client, {"image": warm_ref})  # into the cache
                run_one(client, {"image": warm_ref, "isolation": "gvisor"})
                ids = {
                    "process": [run_one(client, {}) for _ in range(n)],
                    "warm": [run_one(client, {"image": warm_ref}) for _ in range(n)],
                    "gvisor": [
                        run_one(client, {"image": warm_ref, "isolation": "gvisor"})
                        for _ in range(n)
                    ],
                    "cold": [run_one(client, {"image": ref}) for ref in cold_refs],
                }
                pulled = []
                for i in range(PULLS):
                    time.sleep(1.0)  # the last job's teardown done: the pull alone
                    image = f"{registry.host}/bench/debian-python:v{i}"
                    pulled.append(run_one(client, {"image": image}))
            # skopeo alone under the same load: the server and its agent still running
            alone_s = skopeo_alone(f"{registry.host}/bench/debian-python@{digests[0]}", PULLS)
            common.stop(srv.proc)
            for name, job_ids in ids.items():
                result[name] = job_times(srv.db_path(), job_ids)
            pulls = [pull_seconds(srv.db_path(), job_id) for job_id in pulled]
            pull_s = (
                sorted(p for p in pulls if p is not None)[len(pulls) // 2] if all(pulls) else None
            )
        p50 = {k: result[k]["submit_to_end_ms"]["p50_ms"] for k in ids}
        result["pull"] = {
            "image_bytes": layout_bytes(debian_python_layout()),
            "agent_pulls_s": pulls,
            "agent_pull_s": pull_s,
            "skopeo_copy_alone_s": round(alone_s, 3),
            "ratio": common.ratio(alone_s, pull_s),
        }  # fmt: skip
        result["targets"] = {
            "warm_extra_p50_ms": {
                "value": round(p50["warm"] - p50["process"], 1),
                "target_lt": WARM_EXTRA_TARGET_MS,
            },
            "gvisor_p50_ms": {"value": p50["gvisor"], "target_lt": GVISOR_TARGET_MS},
            "pull_ratio": {"value": result["pull"]["ratio"], "target_ge": PULL_RATIO_TARGET},
        }
    finally:
        registry.stop()
        shutil.rmtree(work, ignore_errors=True)
    return common.finish(result, started)


if __name__ == "__main__":
    common.emit(main())
