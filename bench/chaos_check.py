"""The end of ``bench chaos``: the drain and the checks (lost, doubled, stuck, followers,
pipelines, unhandled errors), from the store, the API, the ledger and the logs."""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from bench.chaos_work import TERMINAL, Failover, Pipelines, Submitter, expected_status

RUN_ENDED = ("succeeded", "failed", "cancelled")


def stored_jobs(url: str) -> dict[str, dict[str, Any]]:
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(url, row_factory=dict_row) as conn:
        rows = conn.execute(
            "SELECT id, phase, attempt, attempts, node_id, error, wait_reason, finished_at "
            "FROM jobs"
        ).fetchall()
    return {str(r["id"]): dict(r) for r in rows}


def pipeline_views(api: Failover, pipelines: Pipelines) -> list[dict[str, Any]]:
    return [dict(api.request("GET", f"/v1/pipelines/{run}").json()) for run in pipelines.runs]


def tracked(submitter: Submitter, views: list[dict[str, Any]]) -> set[str]:
    """Acknowledged jobs and the stage jobs of acknowledged pipelines."""
    jobs = set(submitter.acknowledged)
    for view in views:
        jobs.update(s["job_id"] for s in view["stages"] if s.get("job_id"))
    return jobs


def drain(
    api: Failover, url: str, submitter: Submitter, pipelines: Pipelines, within: float
) -> float:
    """Wait (at most ``within`` s) until every tracked job and pipeline ended and every
    log follower saw its job end; the seconds it took."""
    started = time.monotonic()
    deadline = started + within
    while time.monotonic() < deadline:
        with contextlib.suppress(Exception):
            views = pipeline_views(api, pipelines)
            jobs = stored_jobs(url)
            open_jobs = [
                j for j in tracked(submitter, views) if jobs.get(j, {}).get("phase") not in TERMINAL
            ]
            open_runs = [v for v in views if v["status"] not in RUN_ENDED]
            following = [t for t in submitter.follower_threads if t.is_alive()]
            if not open_jobs and not open_runs and not following:
                break
        time.sleep(1.0)
    submitter.stop_followers.set()
    for thread in submitter.follower_threads:
        thread.join(5)
    return round(time.monotonic() - started, 1)


Entry = tuple[str, str, str, float, int]  # job, attempt, event, unix s, agent index
Window = tuple[int, float, float]  # agent index, from, to (unix s): killed or paused


def read_ledger(path: Path) -> list[Entry]:
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) != 5:
            continue
        agent = re.search(r"/work-(\d+)/", parts[4])
        with contextlib.suppress(ValueError):
            out.append(
                (parts[0], parts[1], parts[2], float(parts[3]), int(agent[1]) if agent else -1)
            )
    return out


def doubled_runs(
    ledger: list[Entry], jobs: dict[str, dict[str, Any]], ids: set[str], windows: list[Window]
) -> dict[str, list[Any]]:
    """``attempt_started_twice``, ``succeeded_twice`` (of which ``..._after_agent_fault``:
    one of its runs overlapped a kill or pause of its agent, the at-least-once re-run of
    a node loss) and ``started_after_end``."""
    starts = Counter((j, a) for j, a, event, _, _ in ledger if event == "start" and j in ids)
    runs: dict[str, list[tuple[str, float, float, int]]] = {}
    begun = {(j, a): ts for j, a, event, ts, _ in ledger if event == "start"}
    for job_id, attempt, event, ts, agent in ledger:
        if event == "done" and job_id in ids:
            runs.setdefault(job_id, []).append(
                (attempt, begun.get((job_id, attempt), ts), ts, agent)
            )
    twice = sorted(j for j, done in runs.items() if len(done) > 1)
    faulted = [
        j
        for j in twice
        if any(
            w_agent == agent and t0 <= w1 and t1 >= w0
            for _, t0, t1, agent in runs[j]
            for w_agent, w0, w1 in windows
        )
    ]
    late = []
    for job_id, attempt, event, ts, _ in ledger:
        finished = jobs.get(job_id, {}).get("finished_at")
        # a start after the store recorded the job's end (1 s of slack for the clocks'
        # granularity: the store's end is stamped after the job's last line)
        if event == "start" and job_id in ids and finished and ts > finished / 1000 + 1.0:
            late.append([job_id, attempt, round(ts - finished / 1000, 1)])
    return {
        "attempt_started_twice": sorted([j, a] for (j, a), n in starts.items() if n > 1),
        "succeeded_twice": twice,
        "succeeded_twice_after_agent_fault": faulted,
        "started_after_end": late,
    }


def follower_figures(api: Failover, submitter: Submitter) -> dict[str, Any]:
    missing = duplicated = out_of_order = unended = 0
    examples = []
    for followed in submitter.followed:
        answer = api.request("GET", f"/v1/jobs/{followed.job_id}/logs?stream=stdout")
        stored = [e["line"] for e in answer.json()["logs"]]
        ids = [event_id for event_id, _ in followed.seen]
        lines = [line for _, line in followed.seen]
        gone = sum((Counter(stored) - Counter(lines)).values())
        twice = len(ids) - len(set(ids))
        disorder = sum(1 for a, b in itertools.pairwise(ids) if b < a)
        missing, duplicated, out_of_order = (
            missing + gone,
            duplicated + twice,
            out_of_order + disorder,
        )
        unended += 0 if followed.ended else 1
        if gone or twice or disorder or not followed.ended:
            examples.append(
                {
                    "job_id": followed.job_id,
                    "stored": len(stored),
                    "seen": len(lines),
                    "ended": followed.ended,
                    "reconnects": followed.reconnects,
                }
            )
    return {
        "followed": len(submitter.followed),
        "lines_seen": sum(len(f.seen) for f in submitter.followed),
        "reconnects": sum(f.reconnects for f in submitter.followed),
        "missing": missing,
        "duplicated": duplicated,
        "out_of_order": out_of_order,
        "unended": unended,
        "examples": examples[:5],
    }


def pipeline_figures(views: list[dict[str, Any]]) -> dict[str, Any]:
    statuses = Counter(str(v["status"]) for v in views)
    wrong = [
        {
            "id": v["pipeline_run_id"],
            "status": v["status"],
            "stages": {s["name"]: s["phase"] for s in v["stages"]},
        }
        for v in views
        if v["status"] not in RUN_ENDED or v["status"] != expected_status(v["stages"])
    ]
    return {
        "runs": len(views),
        "statuses": dict(statuses),
        "inconsistent": len(wrong),
        "examples": wrong[:5],
    }


def check(
    api: Failover,
    url: str,
    ledger_path: Path,
    submitter: Submitter,
    pipelines: Pipelines,
    windows: list[Window],
) -> dict[str, Any]:
    views = pipeline_views(api, pipelines)
    ids = tracked(submitter, views)
    jobs = stored_jobs(url)
    ledger = read_ledger(ledger_path)
    started = {j for j, _, event, _, _ in ledger if event == "start"}
    missing = sorted(j for j in submitter.acknowledged if j not in jobs)
    never_ran = sorted(
        j for j in ids if j in jobs and jobs[j]["phase"] in TERMINAL and j not in started
    )
    stuck = [
        {k: jobs[j][k] for k in ("id", "phase", "node_id", "attempt", "wait_reason")}
        for j in sorted(ids)
        if j in jobs and jobs[j]["phase"] not in TERMINAL
    ]
    doubled = doubled_runs(ledger, jobs, ids, windows)
    # a job whose agent was killed or cut off past the grace while it ran is run again as
    # a new attempt (at least once, docs/jobs.md): not a double; a second success with no
    # such fault, a (job, attempt) started twice or a start after the end are
    faulted = set(doubled["succeeded_twice_after_agent_fault"])
    unexplained = [j for j in doubled["succeeded_twice"] if j not in faulted]
    total = (
        len(doubled["attempt_started_twice"]) + len(doubled["started_after_end"]) + len(unexplained)
    )
    phases = Counter(jobs[j]["phase"] for j in submitter.acknowledged if j in jobs)
    failed = [
        {"id": j, "error": jobs[j]["error"]}
        for j in sorted(ids)
        if jobs.get(j, {}).get("phase") == "failed"
    ]
    return {
        "jobs": {
            "submitted": submitter.submitted,
            "acknowledged": len(submitter.acknowledged),
            "refused": submitter.refused,
            "gave_up": submitter.gave_up,
            "by_kind": dict(Counter(submitter.acknowledged.values())),
            "phases": dict(phases),
            "succeeded": phases.get("succeeded", 0),
            "failed": phases.get("failed", 0),
            "requeued": sum(1 for j in ids if jobs.get(j, {}).get("attempts")),
            "failed_examples": failed[:5],
            "ledger_lines": len(ledger),
            "ledger_unknown_jobs": len({e[0] for e in ledger} - ids),
        },
        "lost": len(missing) + len(never_ran),
        "lost_jobs": {"not_stored": missing[:10], "never_ran": never_ran[:10]},
        "doubled": total,
        "rerun_after_agent_fault": len(faulted),
        "doubled_jobs": {k: v[:10] for k, v in doubled.items()},
        "stuck": len(stuck),
        "stuck_jobs": stuck[:10],
        "followers": follower_figures(api, submitter),
        "pipelines": pipeline_figures(views),
    }


def unhandled(paths: list[Path]) -> dict[str, Any]:
    """ERROR/CRITICAL log records with a traceback or "unhandled", and raw traceback lines
    (output that did not go through the JSON logger)."""
    found: list[dict[str, Any]] = []
    for path in paths:
        with contextlib.suppress(OSError), path.open(errors="replace") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except ValueError:
                    if line.startswith("Traceback"):
                        found.append({"file": path.name, "raw": line.strip()[:200]})
                    continue
                if not isinstance(record, dict) or record.get("level") not in ("error", "critical"):
                    continue
                if "exc" in record or "unhandled" in str(record.get("msg", "")).lower():
                    exc = str(record.get("exc", "")).splitlines()
                    named = [ln.strip(" |") for ln in exc if "Error" in ln or "Exception" in ln]
                    found.append({"file": path.name, "msg": record.get("msg"), "exc": named[-1:]})
    return {"unhandled_errors": len(found), "unhandled_examples": found[:5]}
