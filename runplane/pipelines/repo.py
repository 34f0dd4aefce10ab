"""Pipeline runs in the store: ``pipeline_runs`` (one row per run, with the stage phase
counts for list views) and ``pipeline_stages`` (one row per stage: its body as submitted
and its state). The pipeline actor writes a transition's changed stages and the run row in
one transaction before it acts on it; stage jobs carry ``pipeline_run_id`` and ``stage``
(unique per run), which a rebuild reads back (``stage_jobs``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runplane.persistence import Row, Store, Tx, from_json, now_ms, to_json
from runplane.persistence.revocable import newest_page

from .machine import PipelineState, Stage, StagePhase, Status

#: The columns a new run and its stages are inserted with; reads add the retry counts.
RUN_COLUMNS = (
    "id, org_id, project, name, submitted_by, status, origin, stage_count, progress, "
    "created_at, started_at, finished_at, updated_at"
)
STAGE_COLUMNS = (
    "idx, name, needs, allow_failure, stack, body, phase, job_id, error, reason, final_metrics"
)
_RUN_READ = RUN_COLUMNS + ", retries"
_STAGE_READ = STAGE_COLUMNS + ", retry"


@dataclass(frozen=True, slots=True)
class RunRow:
    id: str
    org_id: str
    project: str
    name: str
    submitted_by: str
    status: Status
    origin: str
    stage_count: int
    progress: dict[str, int]
    created_at: int
    started_at: int | None
    finished_at: int | None
    retries: int = 0  # POST .../retry so far

    @classmethod
    def of(cls, row: Row) -> RunRow:
        return cls(
            id=row["id"],
            org_id=row["org_id"],
            project=row["project"],
            name=row["name"],
            submitted_by=row["submitted_by"],
            status=Status(row["status"]),
            origin=row["origin"],
            stage_count=int(row["stage_count"]),
            progress=from_json(row["progress"]),
            created_at=int(row["created_at"]),
            started_at=row["started_at"],
            finished_at=row["finished_at"],
            retries=int(row.get("retries") or 0),
        )


@dataclass(frozen=True, slots=True)
class StageRow:
    """A stage as stored: the machine's :class:`Stage` plus its stack and body."""

    stage: Stage
    stack: str
    body: dict[str, Any]

    @classmethod
    def of(cls, row: Row) -> StageRow:
        return cls(
            Stage(
                name=row["name"],
                needs=tuple(from_json(row["needs"])),
                allow_failure=bool(row["allow_failure"]),
                phase=StagePhase(row["phase"]),
                job_id=row["job_id"],
                error=row["error"],
                reason=row["reason"],
                final_metrics=from_json(row["final_metrics"]),
                retry=int(row.get("retry") or 0),
            ),
            row["stack"],
            from_json(row["body"]),
        )


@dataclass(frozen=True, slots=True)
class NewRun:
    id: str
    org_id: str
    project: str
    name: str
    submitted_by: str
    origin: str
    #: (name, needs, allow_failure, stack, body) per stage, in submitted order
    stages: Sequence[tuple[str, Sequence[str], bool, str, dict[str, Any]]]


def insert_run(run: NewRun) -> Any:
    """A transaction function writing the run and its stages (all pending)."""
    now = now_ms()
    progress = {p.value: 0 for p in StagePhase}
    progress[StagePhase.PENDING.value] = len(run.stages)

    def write(tx: Tx) -> None:
        tx.execute(
            f"INSERT INTO pipeline_runs ({RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (
                run.id,
                run.org_id,
                run.project,
                run.name,
                run.submitted_by,
                Status.PENDING.value,
                run.origin,
                len(run.stages),
                to_json(progress),
                now,
                None,
                None,
                now,
            ),
        )
        tx.execute_many(
            f"INSERT INTO pipeline_stages (run_id, {STAGE_COLUMNS}) "
            "VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                (
                    run.id,
                    i,
                    name,
                    to_json(list(needs)),
                    1 if allow_failure else 0,
                    stack,
                    to_json(body),
                    StagePhase.PENDING.value,
                    None,
                    None,
                    None,
                    "{}",
                )
                for i, (name, needs, allow_failure, stack, body) in enumerate(run.stages)
            ],
        )

    return write


def save(
    run_id: str, state: PipelineState, changed: Sequence[str], progress: dict[str, int]
) -> Any:
    """A transaction function writing the ``changed`` stages and the run's status, times
    and ``progress`` (read from ``state`` now: the function runs later)."""
    stage_rows = []
    for name in changed:
        s = state.stage(name)
        stage_rows.append(
            (
                s.phase.value,
                s.job_id,
                s.error,
                s.reason,
                to_json(dict(s.final_metrics)),
                s.retry,
                run_id,
                state.index[name],
            )
        )
    run_params = (
        state.status.value,
        state.started_at,
        state.finished_at,
        to_json(progress),
        state.retries,
        now_ms(),
        run_id,
    )

    def write(tx: Tx) -> None:
        if stage_rows:
            tx.execute_many(
                "UPDATE pipeline_stages SET phase = ?, job_id = ?, error = ?, reason = ?,"
                " final_metrics = ?, retry = ? WHERE run_id = ? AND idx = ?",
                stage_rows,
            )
        tx.execute(
            "UPDATE pipeline_runs SET status = ?, started_at = ?, finished_at = ?,"
            " progress = ?, retries = ?, updated_at = ? WHERE id = ?",
            run_params,
        )

    return write


async def get_run(store: Store, run_id: str, org_id: str | None) -> RunRow | None:
    """The run, None when there is none or it is not ``org_id``'s (None: any org)."""
    row = await store.fetchone(f"SELECT {_RUN_READ} FROM pipeline_runs WHERE id = ?", (run_id,))
    if row is None or (org_id is not None and row["org_id"] != org_id):
        return None
    return RunRow.of(row)


async def live_among(store: Store, run_ids: Sequence[str]) -> set[str]:
    """Which of ``run_ids`` are pipeline runs that have not ended (one query)."""
    if not run_ids:
        return set()
    marks = ", ".join("?" * len(run_ids))
    ended = [s.value for s in Status if s.terminal]
    rows = await store.fetchall(
        f"SELECT id FROM pipeline_runs WHERE id IN ({marks}) "
        f"AND status NOT IN ({', '.join('?' * len(ended))})",
        (*run_ids, *ended),
    )
    return {str(r["id"]) for r in rows}


async def get_stages(store: Store, run_id: str) -> list[StageRow]:
    rows = await store.fetchall(
        f"SELECT {_STAGE_READ} FROM pipeline_stages WHERE run_id = ? ORDER BY idx", (run_id,)
    )
    return [StageRow.of(r) for r in rows]


async def list_runs(store: Store, org_id: str | None, *, limit: int, offset: int) -> list[RunRow]:
    """Newest first."""
    rows = await newest_page(store, "pipeline_runs", _RUN_READ, org_id, limit=limit, offset=offset)
    return [RunRow.of(r) for r in rows]


async def live_ids(store: Store) -> list[str]:
    """Runs not in a terminal status, oldest first (started again at server start)."""
    rows = await store.fetchall(
        "SELECT id FROM pipeline_runs WHERE status IN (?, ?) ORDER BY id",
        (Status.PENDING.value, Status.RUNNING.value),
    )
    return [r["id"] for r in rows]


async def stage_jobs(store: Store, run_id: str) -> list[Row]:
    """The jobs the run launched: id, stage, stage_retry, phase, error, final_metrics (JSON
    decoded)."""
    rows = await store.fetchall(
        "SELECT id, stage, stage_retry, phase, error, final_metrics FROM jobs"
        " WHERE pipeline_run_id = ?",
        (run_id,),
    )
    return [{**r, "final_metrics": from_json(r["final_metrics"] or "{}")} for r in rows]
