"""A ``jobs`` row as the code reads it: :class:`JobRow`, typed, its JSON columns decoded
once (``runplane/jobs/repo.py`` returns these; the node side has ``NodeRow``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runplane.persistence import from_json

from .jobspec import JobSpec
from .phase import Phase, RankState


def _decoded(value: Any) -> Any:
    """A JSON column's value: text (as read from the store) is parsed, anything else (a
    mapping built in memory) is taken as it is; SQL NULL and empty text are None."""
    if isinstance(value, str):
        return from_json(value) if value else None
    return value


@dataclass(frozen=True, slots=True)
class JobRow:
    """One row of ``jobs`` (the columns of ``repo.JOB_COLUMNS``). Immutable: a changed
    copy is ``dataclasses.replace(row, ...)``; do not mutate the decoded containers."""

    id: str
    org_id: str
    project: str
    submitted_by: str
    stack: str
    image: str
    phase: Phase
    priority: int
    mode: str
    seed: int
    spec_hash: str
    #: the resolved spec (what runs, secrets included: views redact)
    spec: JobSpec
    node_id: str | None
    attempt: int  # current attempt number (fencing)
    attempts: int  # infra requeues
    error: str | None
    wait_reason: str | None
    final_metrics: dict[str, float]
    #: the ArtifactRefs the finished job's agent uploaded
    artifacts: list[dict[str, Any]]
    event_seq: int  # last telemetry seq written
    log_lines: int  # log lines kept (capped)
    log_dropped: int  # log lines past the cap
    created_at: int  # unix ms
    started_at: int | None
    finished_at: int | None
    updated_at: int
    #: the stored ResolvedRun; None for a job created before runs
    run: dict[str, Any] | None
    #: the job this one is a rerun of (``POST /v1/jobs/{id}/rerun``); None when submitted
    rerun_of: str | None = None
    #: how the process ended, as the agent saw it: exit code (None if killed by a signal
    #: or never started) and the signal's name
    exit_code: int | None = None
    signal: str | None = None
    #: the GPU devices the agent assigned to the current attempt (UUIDs, else indices)
    gpus: tuple[str, ...] = ()
    #: its realtime streams, per name: kind, count, last seq, last teleop seq (decoded
    #: JSON; ``runplane/streams/job_streams.py``), None before the first
    streams: dict[str, Any] | None = None
    #: the pipeline run and stage that launched it; None for a job submitted on its own
    pipeline_run_id: str | None = None
    stage: str | None = None
    #: the pipeline retry that launched it (0: the run's first)
    stage_retry: int = 0
    #: the session whose pod it carries; None for other jobs
    session_id: str | None = None
    #: user-level retries so far (its retry policy), when a waiting retry goes back to
    #: placement's queue (unix ms; None when not waiting one), and the retried tries'
    #: outcomes (oldest first)
    retries: int = 0
    retry_at: int | None = None
    tries: tuple[dict[str, Any], ...] = ()
    #: the job array it was submitted in (``POST /v1/jobs/batch``) and its index there
    array_id: str | None = None
    array_index: int | None = None
    #: when the retention janitor deleted its logs, metric and stream points and
    #: artifacts (unix ms); None while they are kept
    purged_at: int | None = None
    #: the number of the last agent report of the current attempt stored (the agent
    #: resends from the next one after a server crash; a lower one is a duplicate)
    report_n: int = 0
    #: times a job of higher priority stopped it to take its place (docs/placement.md)
    preemptions: int = 0
    #: a gang's ranks in its current (or last) attempt: (node id, phase) by rank
    #: (docs/jobs.md "Multi-node jobs"); empty for a plain job
    ranks: tuple[RankState, ...] = ()
    #: the port a gang's rank 0 listens on (``RUNPLANE_MASTER_PORT``)
    master_port: int | None = None

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> JobRow:
        """From a store row (JSON columns as text) or a mapping with them decoded."""
        return cls(
            id=row["id"],
            org_id=row["org_id"],
            project=row["project"],
            submitted_by=row["submitted_by"],
            stack=row["stack"],
            image=row["image"],
            phase=Phase(row["phase"]),
            priority=row["priority"],
            mode=row["mode"],
            seed=row["seed"],
            spec_hash=row["spec_hash"],
            spec=JobSpec.load(row["spec"]),
            node_id=row["node_id"],
            attempt=row["attempt"],
            attempts=row["attempts"],
            error=row["error"],
            wait_reason=row["wait_reason"],
            final_metrics=_decoded(row["final_metrics"]) or {},
            artifacts=_decoded(row["artifacts"]) or [],
            event_seq=row["event_seq"],
            log_lines=row["log_lines"],
            log_dropped=row["log_dropped"],
            created_at=row["created_at"],
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            updated_at=row["updated_at"],
            run=_decoded(row["run"]),
            rerun_of=row.get("rerun_of"),
            exit_code=row.get("exit_code"),
            signal=row.get("signal"),
            gpus=tuple(_decoded(row.get("gpus")) or ()),
            streams=_decoded(row.get("streams")),
            pipeline_run_id=row.get("pipeline_run_id"),
            stage=row.get("stage"),
            stage_retry=row.get("stage_retry") or 0,
            session_id=row.get("session_id"),
            retries=row.get("retries") or 0,
            retry_at=row.get("retry_at"),
            tries=tuple(_decoded(row.get("tries")) or ()),
            array_id=row.get("array_id"),
            array_index=row.get("array_index"),
            purged_at=row.get("purged_at"),
            report_n=row.get("report_n") or 0,
            preemptions=row.get("preemptions") or 0,
            ranks=ranks_of(_decoded(row.get("ranks"))),
            master_port=row.get("master_port"),
        )


def ranks_of(stored: Any) -> tuple[RankState, ...]:
    """A gang's ranks from the ``ranks`` column's JSON (None: a plain job)."""
    if not stored:
        return ()
    return tuple(RankState(r["node_id"], Phase(r["phase"])) for r in stored or ())


def ranks_json(ranks: tuple[RankState, ...]) -> list[dict[str, Any]] | None:
    """The ``ranks`` column's value (and the view's ``ranks``): None for a plain job."""
    if not ranks:
        return None
    return [{"rank": i, "node_id": r.node_id, "phase": r.phase.value} for i, r in enumerate(ranks)]


def rank_nodes(stored: str) -> tuple[str, ...]:
    """A gang's rank nodes (rank 0 first) from the ``ranks`` column's text."""
    return tuple(r.node_id for r in ranks_of(from_json(stored)))
