"""The canonical Job view (spec "Job" and "JobViewSpec"), built from a jobs row.

Secret-looking env values are redacted in every view; the stored spec keeps them because
the job needs them to run.
"""

from __future__ import annotations

from typing import Any

from runplane.jobs.jobspec import JobSpec, StoredMount
from runplane.jobs.phase import Phase
from runplane.jobs.rows import JobRow, ranks_json
from runplane.jobs.spec import DISPLAY_KEY, SETUP_KEY
from runplane.sealed_env import redact_env
from runplane.timefmt import iso_ms_or_none

_TRUTHY = {"1", "true", "yes", "on"}


def _mount_view(mount: StoredMount | None) -> dict[str, Any] | None:
    if not mount:
        return None
    view: dict[str, Any] = {"type": mount.type, "path": mount.path}
    if mount.type == "inline":
        view["code"] = mount.ref
    elif mount.type in ("git", "archive") or mount.ref.startswith("http"):
        view["ref"] = mount.ref
    if mount.connection_id:
        # additions (docs/git.md): the connection, the ref asked and the commit it resolved
        # to at submit (``ref`` is then ``<repo_url>#<commit>``, what the agent fetches)
        view.update(connection_id=mount.connection_id, rev=mount.rev, commit=mount.commit)
    return view


def spec_view(spec: JobSpec) -> dict[str, Any]:
    env = dict(spec.env)
    limits, requires = spec.limits, spec.requires
    return {
        "command": list(spec.command),
        "setup": env.get(SETUP_KEY, ""),
        "display": env.get(DISPLAY_KEY, "").strip().lower() in _TRUTHY,
        "env": redact_env(env),
        "config": dict(spec.config),
        "workspace": _mount_view(spec.workspace),
        "inputs": [{"path": m.path, "ref": m.ref, "type": m.type} for m in spec.inputs],
        "outputs": [{"artifact": o.artifact, "glob": o.glob} for o in spec.outputs],
        # addition: the retry policy (docs/jobs.md "Retries"), null without one
        "retry": spec.retry.model_dump(mode="json") if spec.retry is not None else None,
        # addition (docs/placement.md "Preemption"): whether it may be preempted, and
        # its grace between SIGTERM and SIGKILL then (null when it may not)
        "preemptible": bool(spec.preemptible),
        "preempt_grace_sec": spec.preempt_grace_sec if spec.preemptible else None,
        "resources": {
            "cpu_cores": limits.cpu_cores or 0,
            "ram_gb": limits.ram_gb or 0,
            "gpu_count": limits.gpu_count or 0,
            "timeout_sec": limits.timeout_sec or 0,
            "gpu_required": requires.gpu.required,
            "min_tier": requires.trust.min_tier,
        },
    }


def _retries_view(row: JobRow) -> dict[str, Any]:
    """Additions (docs/jobs.md "Retries"): the retries its policy made, each retried try's
    outcome (oldest first), and while it waits out a backoff, when it goes back in line."""
    tries = [
        dict(
            t,
            started_at=iso_ms_or_none(t.get("started_at")),
            finished_at=iso_ms_or_none(t.get("finished_at")),
        )
        for t in row.tries
    ]
    retry_at = iso_ms_or_none(row.retry_at) if row.phase is Phase.QUEUED else None
    # and (docs/placement.md "Preemption") the times it was stopped for a job of higher
    # priority and requeued: neither a failure nor one of ``attempts``
    # and (docs/jobs.md "Multi-node jobs") a gang's ranks: each one's node and phase
    return {
        "retries": row.retries,
        "tries": tries,
        "retry_at": retry_at,
        "preemptions": row.preemptions,
        "nodes": row.spec.nodes or 1,
        "ranks": ranks_json(row.ranks) or [],
    }


def job_view(row: JobRow, *, wait_reason: str | None = None) -> dict[str, Any]:
    """The Job object of the spec for one jobs row."""
    started, finished = row.started_at, row.finished_at
    duration = (finished - started) if started is not None and finished is not None else None
    view: dict[str, Any] = {
        "job_id": row.id,
        "stack": row.stack,
        "image": row.image,
        "phase": row.phase.value,
        "node_id": row.node_id or "",
        "priority": row.priority,
        "mode": row.mode,
        "seed": row.seed,
        "spec_hash": row.spec_hash,
        "project": row.project,
        "org_id": row.org_id,
        # the run number (1-based; 0 before the first assignment) and the requeues so far
        "attempt": row.attempt,
        "attempts": row.attempts,
        "created_at": iso_ms_or_none(row.created_at),
        "started_at": iso_ms_or_none(started),
        "finished_at": iso_ms_or_none(finished),
        "duration_ms": duration,
        "error": row.error or "",
        "spec": spec_view(row.spec),
        # copies: the view is the caller's to change, the row is not
        "final_metrics": dict(row.final_metrics),
        "artifacts": list(row.artifacts),
        # an addition to the spec's Job: the job this one is a rerun of, or null
        "rerun_of": row.rerun_of,
        # additions: how the process ended, as its agent saw it (null until it ended)
        "exit_code": row.exit_code,
        "signal": row.signal,
        # addition: the GPU devices its node assigned (UUIDs, else indices; [] for none)
        "gpus": list(row.gpus),
        # addition: the pipeline run and stage that launched it (null for a plain job)
        "pipeline_run_id": row.pipeline_run_id,
        "stage": row.stage,
        # addition: the session whose pod it carries (docs/sessions.md), else null
        "session_id": row.session_id,
        # addition: the job array it was submitted in (docs/jobs.md "Job arrays") and
        # its index there, else null
        "array_id": row.array_id,
        "array_index": row.array_index,
        # addition (docs/operations.md "Retention"): when the retention policy deleted its
        # log lines, metric and stream points and artifacts (its row and final metrics
        # stay), else null
        "expired_at": iso_ms_or_none(row.purged_at),
        # addition: its realtime streams with the chunks received (docs/streams.md)
        "streams": [
            {"name": name, "kind": s.get("kind", "data"), "count": s.get("count", 0)}
            for name, s in sorted((row.streams or {}).items())
        ],
        **_retries_view(row),
    }
    if row.phase is Phase.QUEUED and (reason := wait_reason or row.wait_reason):
        view["wait_reason"] = reason
    if row.log_dropped:
        view["log_truncated"] = {"kept": row.log_lines, "dropped": row.log_dropped}
    return view
