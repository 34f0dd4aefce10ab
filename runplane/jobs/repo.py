"""SQL for jobs and their telemetry events. Portable (SQLite and PostgreSQL); callers are
actors and services. Rows come back as :class:`JobRow` (``runplane/jobs/rows.py``);
``live_columns`` alone reads narrowed rows, as dicts.

The owner of every write to ``jobs`` and ``job_events`` (docs/architecture.md, "Tables
and their owners"): no other module writes them. Who decides the writes: the job service
(the insert of a submit), the job actor (its state, events and columns, its ``streams``
counters through ``runplane/streams/job_streams.py``), and the retention janitor (the
purge of log lines and metric points, ``purged_at``)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from runplane.jobs import counts
from runplane.jobs.events import StoredEvent, phase_event, system_line_event
from runplane.jobs.phase import TERMINAL, JobState, Phase
from runplane.persistence import Store, Tx, now_ms, to_json
from runplane.problems import Problem

from .alike import SpecPart
from .jobspec import JobSpec
from .rows import JobRow as JobRow  # re-exported: the rows these functions return
from .rows import ranks_json

IDEMPOTENCY_WINDOW_MS = 24 * 3600 * 1000

#: A job's whole stored spec: its own ``spec`` column, or, for an item of a job array
#: stored with its shape's shared part (``job_spec_parts``, migration 0031), that part
#: around the item's config JSON and seed (``alike.SpecPart``): the same text either way.
#: Reads naming it select ``FROM jobs`` + :data:`SPEC_PARTS`.
SPEC = (
    "CASE WHEN jobs.spec_part IS NULL THEN jobs.spec ELSE spec_head || jobs.spec || spec_mid "
    "|| CAST(jobs.seed AS TEXT) || spec_tail END AS spec"
)
SPEC_PARTS = " LEFT JOIN job_spec_parts ON spec_part_id = jobs.spec_part"

JOB_COLUMNS = (
    "id, org_id, project, submitted_by, stack, image, phase, priority, mode, seed, spec_hash, "
    f"{SPEC}, node_id, attempt, attempts, error, wait_reason, final_metrics, artifacts, "
    "event_seq, log_lines, log_dropped, created_at, started_at, finished_at, updated_at, run, "
    "rerun_of, exit_code, signal, gpus, streams, pipeline_run_id, stage, session_id, "
    "retries, retry_at, tries, stage_retry, array_id, array_index, purged_at, report_n, "
    "preemptions, ranks, master_port"
)


@dataclass(frozen=True, slots=True)
class NewJob:
    id: str
    org_id: str
    project: str
    submitted_by: str
    spec: JobSpec
    spec_hash: str
    priority: int
    idempotency_key: str | None = None
    idempotency_hash: str | None = None
    #: the stored ResolvedRun (config provenance, layer diffs, resources, has_runspec)
    run: dict[str, Any] | None = None
    #: admission notes (``cpu 200->128``), written as the job's first system log lines
    notes: tuple[str, ...] = ()
    #: a statement written in the insert's transaction for the new row (its audit row)
    also: Callable[[JobRow], tuple[str, Sequence[Any]]] | None = None
    #: the job this one reruns (``Jobs.rerun``)
    rerun_of: str | None = None
    #: the pipeline run and stage that launched it (``docs/pipelines.md``)
    pipeline_run_id: str | None = None
    stage: str | None = None
    stage_retry: int = 0
    #: the session whose pod this job carries (``docs/sessions.md``)
    session_id: str | None = None
    #: the job array (``POST /v1/jobs/batch``) it belongs to, and its index there
    array_id: str | None = None
    array_index: int | None = None
    #: the ``spec`` column's text when already made (``Alike.stored``; None: encoded in
    #: the insert): the whole spec, or with ``spec_part`` the item's config JSON in it
    spec_json: str | None = None
    #: the shared part of the array's specs this item's spec is stored in (migration 0031)
    spec_part: SpecPart | None = None


def check_key(prior: dict[str, Any] | None, digest: str | None, now: int) -> str | None:
    """The id a replay of a key returns (``prior``: the row that holds the key, with its
    ``id``, ``idempotency_hash`` and ``created_at``), None when the key is free or expired;
    a 409 Problem when it was used with another body (``digest`` differs)."""
    if prior is None or now - prior["created_at"] >= IDEMPOTENCY_WINDOW_MS:
        return None
    if prior["idempotency_hash"] != digest:
        raise Problem(
            409,
            "idempotency_conflict",
            "this Idempotency-Key was used with a different body in the last 24 h;"
            " use a new key for a new job",
        )
    return str(prior["id"])


#: The tables whose rows hold an Idempotency-Key (``id``, ``org_id``, ``idempotency_key``,
#: ``idempotency_hash``, ``created_at``): a job's, and a job array's.
KeyedTable = Literal["jobs", "job_arrays"]


def _prior_sql(table: KeyedTable) -> str:
    return (
        f"SELECT id, idempotency_hash, created_at FROM {table} "
        "WHERE org_id = ? AND idempotency_key = ?"
    )


async def prior_key(
    store: Store, table: KeyedTable, org_id: str, key: str | None, digest: str | None
) -> str | None:
    """Before admission: the id a replay of ``key`` returns (a retry must get its first
    job or array back even when the org is at its quota; None without a key);
    ``claim_key`` re-checks in the insert's transaction."""
    if key is None:
        return None
    prior = await store.fetchone(_prior_sql(table), (org_id, key))
    return check_key(prior, digest, now_ms())


def claim_key(
    tx: Tx, table: KeyedTable, org_id: str, key: str, digest: str | None, now: int
) -> str | None:
    """In the insert's transaction: the id a replay of ``key`` returns, or None when the
    key is free (an expired holder gives it up, so the new row may take it)."""
    prior = tx.fetchone(_prior_sql(table), (org_id, key))
    replay = check_key(prior, digest, now)
    if replay is None and prior is not None:
        tx.execute(f"UPDATE {table} SET idempotency_key = NULL WHERE id = ?", (prior["id"],))
    return replay


def insert_job(store: Store, job: NewJob) -> Any:
    """Return a transaction function inserting ``job`` (with its first ``queued`` phase
    event) and returning the new :class:`JobRow`; with an Idempotency-Key it returns the id
    of the first job for the same key and body instead, and raises a 409 Problem for the
    same key with another body."""

    def run(tx: Tx) -> JobRow | str:
        now = now_ms()
        if job.idempotency_key is not None:
            replay = claim_key(
                tx, "jobs", job.org_id, job.idempotency_key, job.idempotency_hash, now
            )
            if replay is not None:
                return replay
        return write_jobs(tx, [job], now)[0]

    return run


_INSERT_EVENT = "INSERT INTO job_events (job_id, seq, kind, ts, data) VALUES (?,?,?,?,?)"


def write_jobs(tx: Tx, jobs: Sequence[NewJob], now: int) -> list[JobRow]:
    """Insert ``jobs`` with their first events (``queued``, then one system line per
    admission note), count them as submitted and write each one's ``also`` statement, in
    the caller's transaction; the new rows, as ``get_row`` would read them."""
    # an array's jobs share their run object: encoded once (``jobs`` holds them, so an id
    # names one run here)
    run_texts = {id(job.run): to_json(job.run) for job in jobs if job.run is not None}
    parts = {job.spec_part.id: job.spec_part for job in jobs if job.spec_part is not None}
    if parts:
        tx.execute_many(
            "INSERT INTO job_spec_parts (spec_part_id, spec_head, spec_mid, spec_tail) "
            "VALUES (?, ?, ?, ?)",
            [(p.id, p.head, p.mid, p.tail) for p in parts.values()],
        )
    values = [
        {
            **new_row(job, now, run_texts.get(id(job.run))),
            "idempotency_key": job.idempotency_key,
            "idempotency_hash": job.idempotency_hash,
        }
        for job in jobs
    ]
    tx.execute_many(
        f"INSERT INTO jobs ({', '.join(INSERT_COLUMNS)}) "
        f"VALUES ({','.join('?' * len(INSERT_COLUMNS))})",
        [[v[c] for c in INSERT_COLUMNS] for v in values],
    )
    events = []
    for job in jobs:
        events.append(phase_event(job.id, 1, Phase.QUEUED.value, now))
        events += [
            system_line_event(job.id, seq, f"admission: {note}", now)
            for seq, note in enumerate(job.notes, start=2)
        ]
    tx.execute_many(_INSERT_EVENT, events)
    per_org: dict[str, int] = {}
    for job in jobs:
        per_org[job.org_id] = per_org.get(job.org_id, 0) + 1
    for org_id, n in per_org.items():
        counts.count_many(tx, org_id, now, "submitted", n)
    # as get_row reads them back: the JSON columns are the dicts just encoded (JSON-ready
    # already), not decoded again
    rows = [
        JobRow.of({**v, "spec": job.spec, "run": job.run, "final_metrics": {}, "artifacts": []})
        for job, v in zip(jobs, values, strict=True)
    ]
    for job, row in zip(jobs, rows, strict=True):
        if job.also is not None:
            tx.execute(*job.also(row))
    return rows


INSERT_COLUMNS = (
    "id",
    "org_id",
    "project",
    "submitted_by",
    "stack",
    "image",
    "phase",
    "priority",
    "mode",
    "seed",
    "spec_hash",
    "spec",
    "event_seq",
    "idempotency_key",
    "idempotency_hash",
    "created_at",
    "updated_at",
    "run",
    "rerun_of",
    "pipeline_run_id",
    "stage",
    "stage_retry",
    "session_id",
    "array_id",
    "array_index",
    "spec_part",
)


def new_row(job: NewJob, now: int, run_text: str | None = None) -> dict[str, Any]:
    """The jobs row ``insert_job`` writes (JSON columns as the text stored);
    ``JobRow.of`` of it is the row ``get_row`` reads back. ``run_text``: the ``run``
    column's text when already encoded."""
    spec = job.spec
    run = run_text if run_text is not None or job.run is None else to_json(job.run)
    return {
        "id": job.id,
        "org_id": job.org_id,
        "project": job.project,
        "submitted_by": job.submitted_by,
        "stack": spec.stack,
        "image": spec.image,
        "phase": Phase.QUEUED.value,
        "priority": job.priority,
        "mode": spec.mode,
        "seed": spec.seed,
        "spec_hash": job.spec_hash,
        "spec": job.spec_json if job.spec_json is not None else spec.stored_json(),
        "spec_part": job.spec_part.id if job.spec_part is not None else None,
        "node_id": None,
        "attempt": 0,
        "attempts": 0,
        "error": None,
        "wait_reason": None,
        "final_metrics": "{}",
        "artifacts": "[]",
        "event_seq": 1 + len(job.notes),
        "log_lines": len(job.notes),
        "log_dropped": 0,
        "created_at": now,
        "started_at": None,
        "finished_at": None,
        "updated_at": now,
        "run": run,
        "rerun_of": job.rerun_of,
        "pipeline_run_id": job.pipeline_run_id,
        "stage": job.stage,
        "stage_retry": job.stage_retry,
        "session_id": job.session_id,
        "array_id": job.array_id,
        "array_index": job.array_index,
        "retries": 0,
        "retry_at": None,
        "tries": None,
    }


async def get_row(store: Store, job_id: str, org_id: str | None) -> JobRow | None:
    """The job, None when there is none or it is not ``org_id``'s (None: any org)."""
    row = await store.fetchone(
        f"SELECT {JOB_COLUMNS} FROM jobs{SPEC_PARTS} WHERE id = ?", (job_id,)
    )
    if row is None or (org_id is not None and row["org_id"] != org_id):
        return None
    return JobRow.of(row)


async def report_marks(
    store: Store, attempts: Sequence[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    """For each (job id, attempt) that is its job's current attempt, the number of the last
    agent report stored for it (``report_n``; one query): where the agent resumes."""
    if not attempts:
        return {}
    marks = ", ".join("?" * len(attempts))
    rows = await store.fetchall(
        f"SELECT id, attempt, report_n FROM jobs WHERE id IN ({marks})",
        tuple(job_id for job_id, _ in attempts),
    )
    wanted = set(attempts)
    current = {(str(r["id"]), int(r["attempt"])): int(r["report_n"]) for r in rows}
    return {key: n for key, n in current.items() if key in wanted}


async def live_among(store: Store, job_ids: Sequence[str]) -> set[str]:
    """Which of ``job_ids`` are jobs that have not ended (one query)."""
    if not job_ids:
        return set()
    marks = ", ".join("?" * len(job_ids))
    ended = ", ".join("?" * len(TERMINAL))
    rows = await store.fetchall(
        f"SELECT id FROM jobs WHERE id IN ({marks}) AND phase NOT IN ({ended})",
        (*job_ids, *(p.value for p in TERMINAL)),
    )
    return {str(r["id"]) for r in rows}


@dataclass(frozen=True, slots=True)
class JobFilter:
    org_id: str | None = None
    phase: str | None = None
    stack: str | None = None
    project: str | None = None
    spec_hash: str | None = None
    node_id: str | None = None
    pipeline_run_id: str | None = None
    array_id: str | None = None

    def where(self) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, value in (
            ("org_id", self.org_id),
            ("phase", self.phase),
            ("stack", self.stack),
            ("project", self.project),
            ("spec_hash", self.spec_hash),
            ("node_id", self.node_id),
            ("pipeline_run_id", self.pipeline_run_id),
            ("array_id", self.array_id),
        ):
            if value is not None:
                clauses.append(f"{column} = ?")
                params.append(value)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params


def encode_cursor(job_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps({"before": job_id}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))["before"]
    except (ValueError, KeyError, TypeError):
        raise Problem(400, "bad_cursor", "cursor is not one this server issued") from None
    if not isinstance(value, str):
        raise Problem(400, "bad_cursor", "cursor is not one this server issued")
    return value


async def list_rows(
    store: Store, flt: JobFilter, *, limit: int, offset: int = 0, before: str | None = None
) -> list[JobRow]:
    """Newest first. ``before`` is a keyset cursor (ids sort by creation)."""
    where, params = flt.where()
    if before is not None:
        where += (" AND " if where else " WHERE ") + "id < ?"
        params.append(before)
    sql = f"SELECT {JOB_COLUMNS} FROM jobs{SPEC_PARTS}{where} ORDER BY id DESC LIMIT ? OFFSET ?"
    return [JobRow.of(r) for r in await store.fetchall(sql, (*params, limit, offset))]


async def count_rows(store: Store, flt: JobFilter) -> int:
    """How many jobs ``flt`` matches. Narrowed by org alone (or not at all), it is the
    analytics rollup's sum of submits (written with every insert), so a page's ``total``
    costs the same with a million jobs as with ten; other filters count their index
    range."""
    if replace(flt, org_id=None) == JobFilter():
        org = flt.org_id if flt.org_id is not None else counts.ALL_ORGS
        row = await store.fetchone(
            "SELECT COALESCE(SUM(submitted), 0) AS n FROM job_counts WHERE org_id = ?", (org,)
        )
        return int(row["n"]) if row else 0
    where, params = flt.where()
    row = await store.fetchone(f"SELECT COUNT(*) AS n FROM jobs{where}", params)
    return int(row["n"]) if row else 0


async def live_rows(store: Store) -> list[JobRow]:
    """Every job not in a terminal phase (queued, assigned, pulling, running), oldest
    first."""
    return [JobRow.of(r) for r in await live_columns(store, JOB_COLUMNS)]


async def live_columns(store: Store, columns: str) -> list[dict[str, Any]]:
    """``columns`` (a narrowed select list, such as ``"id, phase"``) of every job not in a
    terminal phase, oldest first, as raw store rows (JSON columns still text): for
    start-up recounts that read many rows and few columns. A list naming :data:`SPEC`
    reads the parts too."""
    terminal = tuple(p.value for p in Phase if p.terminal)
    marks = ",".join("?" * len(terminal))
    parts = SPEC_PARTS if SPEC in columns else ""
    return await store.fetchall(
        f"SELECT {columns} FROM jobs{parts} WHERE phase NOT IN ({marks}) ORDER BY id", terminal
    )


async def set_priority(store: Store, job_id: str, priority: int) -> None:
    """A job's new priority (its actor's; placement's queue is told by it)."""
    await store.execute(
        "UPDATE jobs SET priority = ?, updated_at = ? WHERE id = ?", (priority, now_ms(), job_id)
    )


def save_state(
    job_id: str,
    state: JobState,
    events: Sequence[StoredEvent],
    seq: int,
    *,
    ended_org: str | None = None,
    also: Callable[[Tx], Any] | None = None,
    **extra: Any,
) -> Any:
    """A transaction function writing the job's state and new events together; with
    ``ended_org`` (the job's org, when this write ends the job) it also counts the end in
    the analytics rollup; ``also`` runs in the same transaction (the run's webhook
    deliveries, queued with its end)."""
    sets = [
        "phase = ?",
        "attempt = ?",
        "attempts = ?",
        "node_id = ?",
        "error = ?",
        "started_at = ?",
        "finished_at = ?",
        "event_seq = ?",
        "updated_at = ?",
        "retries = ?",
        "retry_at = ?",
        "preemptions = ?",
        "ranks = ?",
        "master_port = ?",
    ]
    params: list[Any] = [
        state.phase.value,
        state.attempt,
        state.attempts,
        state.node_id,
        state.error,
        state.started_at,
        state.finished_at,
        seq,
        now_ms(),
        state.retries,
        state.retry_at,
        state.preemptions,
        to_json(ranks) if (ranks := ranks_json(state.ranks)) is not None else None,
        state.master_port,
    ]
    for column, value in extra.items():
        sets.append(f"{column} = ?")
        params.append(value)

    def run(tx: Tx) -> None:
        if events:
            tx.execute_many(
                "INSERT INTO job_events (job_id, seq, kind, ts, data) VALUES (?,?,?,?,?)", events
            )
        tx.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE id = ?", (*params, job_id))
        if ended_org is not None and state.finished_at is not None:
            counts.count(tx, ended_org, state.finished_at, counts.ENDED[state.phase.value])
        if also is not None:
            also(tx)

    return run


async def events_after(
    store: Store, job_id: str, after_seq: int, *, limit: int = 5000, kinds: Sequence[str] = ()
) -> list[StoredEvent]:
    sql = "SELECT seq, kind, ts, data FROM job_events WHERE job_id = ? AND seq > ?"
    params: list[Any] = [job_id, after_seq]
    if kinds:
        sql += f" AND kind IN ({','.join('?' * len(kinds))})"
        params.extend(kinds)
    sql += " ORDER BY seq LIMIT ?"
    params.append(limit)
    rows = await store.fetchall(sql, params)
    return [StoredEvent(job_id, r["seq"], r["kind"], r["ts"], r["data"]) for r in rows]


# streams and retention --------------------------------------------------------------------


def save_streams(tx: Tx, job_id: str, saved: str) -> None:
    """The job's stream counters (the ``streams`` JSON column,
    ``runplane/streams/job_streams.py``), in the caller's transaction."""
    tx.execute("UPDATE jobs SET streams = ? WHERE id = ?", (saved, job_id))


async def purge_events(store: Store, job_id: str, event_seq: int, chunk: int) -> int:
    """Delete the job's log lines and metric points, ``chunk`` seqs per statement (one
    transaction each); its phase events stay. Answers how many rows went."""
    deleted = 0
    for low in range(0, event_seq, chunk):
        deleted += await store.execute(
            "DELETE FROM job_events WHERE job_id = ? AND seq > ? AND seq <= ? "
            "AND kind IN ('log', 'metric')",
            (job_id, low, low + chunk),
        )
    return deleted


async def mark_purged(store: Store, job_id: str, now: int) -> None:
    await store.execute("UPDATE jobs SET purged_at = ? WHERE id = ?", (now, job_id))
