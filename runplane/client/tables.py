"""What the CLI's job tables show (docs/cli.md ``runplane ls``), read as the web UI reads
them (runplane/static/format.js): a name or command summary, the node's name, relative
times, durations live for running jobs; and the sweep table of a job array (one row per
job, the swept config keys and final metrics as columns, the best of each metric marked)."""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from .api import JSONObject

#: How much of a command's first line a list shows.
SUMMARY_CHARS = 40


def _parse(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def ago(iso: str | None, now: datetime | None = None) -> str:
    """``12 s ago``, ``3 min ago``, ``2 h ago``, ``4 d ago`` ('' for no time)."""
    if not iso:
        return ""
    seconds = round(((now or datetime.now(UTC)) - _parse(iso)).total_seconds())
    span = abs(seconds)
    if span < 60:
        text = f"{span} s"
    elif span < 3600:
        text = f"{span // 60} min"
    elif span < 86400:
        text = f"{span // 3600} h"
    else:
        text = f"{span // 86400} d"
    return f"in {text}" if seconds < 0 else f"{text} ago"


def duration(ms: float | None) -> str:
    """``850 ms``, ``12.3 s``, ``4 min 05 s``, ``2 h 10 min``."""
    if ms is None or ms < 0:
        return ""
    if ms < 1000:
        return f"{round(ms)} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):02d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def job_duration(job: JSONObject, now: datetime | None = None) -> str:
    """Final once the job ended; counting from ``started_at`` while it runs."""
    if job.get("duration_ms") is not None:
        return duration(job["duration_ms"])
    if job.get("started_at") and not job.get("finished_at"):
        elapsed = (now or datetime.now(UTC)) - _parse(job["started_at"])
        return duration(elapsed.total_seconds() * 1000)
    return ""


def command_summary(argv: list[str] | None, limit: int = SUMMARY_CHARS) -> str:
    """The command's first line, cut to ``limit`` characters (``…`` where cut)."""
    lines = shlex.join(argv or []).split("\n")
    first = lines[0]
    if len(first) > limit:
        return first[: limit - 1] + "…"
    return first + " …" if len(lines) > 1 else first


def job_name(job: JSONObject, stacks: dict[str, JSONObject] | None = None) -> str:
    """A pipeline stage's name, else the command's summary; a job running its stack's own
    default program (a script that says little in one line) is named by the stack and the
    config it was given, less the stack's defaults (``sim-cartpole episodes=50``), as in
    the UI. ``stacks``: the catalog by name (GET /v1/stacks)."""
    if job.get("stage"):
        return str(job["stage"])
    spec = job.get("spec") or {}
    command = spec.get("command") or []
    stack = (stacks or {}).get(str(job.get("stack")), {})
    if command and command != stack.get("default_command"):
        return command_summary(command)
    defaults = {f.get("key"): f.get("default") for f in stack.get("config") or []}
    config = " ".join(
        f"{k}={json.dumps(v) if isinstance(v, dict | list) else v}"
        for k, v in (spec.get("config") or {}).items()
        if k not in defaults or defaults[k] != v
    )
    return f"{job.get('stack', '')} {config}".strip()


def job_rows(
    jobs: Iterable[JSONObject],
    node_names: dict[str, str],
    stacks: dict[str, JSONObject] | None = None,
) -> Iterable[tuple[Any, ...]]:
    """``runplane ls``'s rows: JOB, NAME, STACK, PHASE, NODE, DURATION, CREATED, WAITING."""
    for j in jobs:
        node = j.get("node_id")
        yield (
            j["job_id"],
            job_name(j, stacks),
            j["stack"],
            j["phase"],
            node_names.get(node, node) if node else "",
            job_duration(j),
            ago(j.get("created_at")),
            j.get("wait_reason"),
        )


def sweep(array_id: str, jobs: list[JSONObject], stacks: list[JSONObject]) -> JSONObject:
    """The sweep table of a job array (docs/cli.md): ``{array_id, config_keys,
    metric_keys, best: {metric: job_id}, rows: [{index, job_id, phase, config,
    metrics}]}``; config keys are those whose value differs between the jobs."""
    jobs = sorted(jobs, key=lambda j: (j.get("array_index") is None, j.get("array_index") or 0))
    configs = [(j.get("spec") or {}).get("config") or {} for j in jobs]
    every_key = sorted({k for c in configs for k in c})
    config_keys = [k for k in every_key if len({repr(c.get(k)) for c in configs}) > 1]
    metric_keys = sorted({k for j in jobs for k in (j.get("final_metrics") or {})})
    rows = [
        {
            "index": j.get("array_index"),
            "job_id": j["job_id"],
            "phase": j["phase"],
            "config": {k: c.get(k) for k in config_keys},
            "metrics": {k: v for k, v in (j.get("final_metrics") or {}).items()},
        }
        for j, c in zip(jobs, configs, strict=True)
    ]
    higher = _higher_is_better(jobs, stacks)
    best: dict[str, str] = {}
    for key in metric_keys:
        scored = [(r["metrics"][key], r["job_id"]) for r in rows if _number(r["metrics"].get(key))]
        if key in higher and scored:
            best[key] = (max if higher[key] else min)(scored, key=lambda s: s[0])[1]
    return {
        "array_id": array_id,
        "config_keys": config_keys,
        "metric_keys": metric_keys,
        "best": best,
        "rows": rows,
    }


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _higher_is_better(jobs: list[JSONObject], stacks: list[JSONObject]) -> dict[str, bool]:
    """metric key -> higher_is_better, from the catalog entry of the array's stack."""
    names = {j["stack"] for j in jobs}
    return {
        str(m["key"]): bool(m.get("higher_is_better"))
        for s in stacks
        if s.get("name") in names
        for m in s.get("metrics") or []
    }


def sweep_rows(table: JSONObject) -> tuple[list[str], list[tuple[Any, ...]]]:
    """The sweep table as text: headers and rows, a trailing ``*`` on each best metric."""
    config_keys, metric_keys = table["config_keys"], table["metric_keys"]
    headers = ["INDEX", "JOB", "PHASE", *config_keys, *metric_keys]
    rows = []
    for r in table["rows"]:
        marks = [
            ""
            if r["metrics"].get(k) is None
            else f"{r['metrics'][k]}{'*' if table['best'].get(k) == r['job_id'] else ''}"
            for k in metric_keys
        ]
        rows.append(
            (
                r["index"],
                r["job_id"],
                r["phase"],
                *(r["config"].get(k) for k in config_keys),
                *marks,
            )
        )
    return headers, rows
