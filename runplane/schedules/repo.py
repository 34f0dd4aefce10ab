"""Schedules in the store: ``schedules`` (one row each) and ``schedule_runs`` (one row per
occurrence fired or skipped). Portable SQL (SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runplane.persistence import Store, Tx, from_json, to_json

from .timing import Timing

COLUMNS = (
    "id, org_id, name, cron, every_sec, timezone, anchor, kind, body, concurrency, suspend, "
    "created_by, credential, credential_id, created_at, updated_at, next_run_at, "
    "last_run_at, last_error"
)
RUN_COLUMNS = "schedule_id, due_at, fired_at, outcome, ref, status, detail"
#: Runs kept (and shown) per schedule; older rows are pruned as new ones are written.
KEEP_RUNS = 20


@dataclass(frozen=True, slots=True)
class ScheduleRow:
    id: str
    org_id: str
    name: str
    cron: str | None
    every_sec: int | None
    timezone: str
    anchor: int
    kind: str  # job | pipeline
    body: dict[str, Any]  # as stored (secret-looking env values sealed)
    concurrency: str  # allow | forbid | replace
    suspend: bool
    created_by: str
    credential: str  # none | admin | token | session: what it was created with
    credential_id: str | None
    created_at: int
    updated_at: int
    next_run_at: int | None
    last_run_at: int | None = None
    last_error: str | None = None

    @property
    def timing(self) -> Timing:
        return Timing(self.cron, self.every_sec, self.timezone, self.anchor)

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> ScheduleRow:
        return cls(
            **{
                **row,
                "body": from_json(row["body"]) if isinstance(row["body"], str) else row["body"],
                "suspend": bool(row["suspend"]),
            }
        )

    def values(self) -> tuple[Any, ...]:
        return tuple(
            to_json(self.body)
            if name == "body"
            else int(self.suspend)
            if name == "suspend"
            else getattr(self, name)
            for name in COLUMNS.split(", ")
        )


@dataclass(frozen=True, slots=True)
class RunRow:
    schedule_id: str
    due_at: int
    fired_at: int
    outcome: str  # created | skipped | error
    ref: str | None = None  # the job or pipeline run created
    status: int | None = None  # the HTTP status of an error (429, 422, ...)
    detail: str | None = None


async def insert(store: Store, row: ScheduleRow) -> None:
    await store.execute(
        f"INSERT INTO schedules ({COLUMNS}) VALUES ({','.join('?' * len(COLUMNS.split(', ')))})",
        row.values(),
    )


async def replace_row(store: Store, row: ScheduleRow) -> None:
    """Write every column of ``row`` (a PATCH)."""
    names = COLUMNS.split(", ")[1:]
    sets = ", ".join(f"{n} = ?" for n in names)
    await store.execute(f"UPDATE schedules SET {sets} WHERE id = ?", (*row.values()[1:], row.id))


async def delete(store: Store, schedule_id: str) -> None:
    def run(tx: Tx) -> None:
        tx.execute("DELETE FROM schedule_runs WHERE schedule_id = ?", (schedule_id,))
        tx.execute("DELETE FROM schedules WHERE id = ?", (schedule_id,))

    await store.transaction(run)


async def get(store: Store, schedule_id: str, org_id: str | None) -> ScheduleRow | None:
    """The schedule, None when there is none or it is not ``org_id``'s (None: any org)."""
    row = await store.fetchone(f"SELECT {COLUMNS} FROM schedules WHERE id = ?", (schedule_id,))
    if row is None or (org_id is not None and row["org_id"] != org_id):
        return None
    return ScheduleRow.of(row)


async def listing(
    store: Store, org_id: str | None, *, limit: int, offset: int
) -> list[ScheduleRow]:
    where, params = ("WHERE org_id = ? ", [org_id]) if org_id is not None else ("", [])
    rows = await store.fetchall(
        f"SELECT {COLUMNS} FROM schedules {where}ORDER BY id DESC LIMIT ? OFFSET ?",
        (*params, limit, offset),
    )
    return [ScheduleRow.of(r) for r in rows]


async def count(store: Store, org_id: str) -> int:
    row = await store.fetchone("SELECT COUNT(*) AS n FROM schedules WHERE org_id = ?", (org_id,))
    return int(row["n"]) if row else 0


async def active(store: Store) -> list[ScheduleRow]:
    """Every schedule with a next occurrence (not suspended)."""
    rows = await store.fetchall(
        f"SELECT {COLUMNS} FROM schedules WHERE next_run_at IS NOT NULL ORDER BY next_run_at", ()
    )
    return [ScheduleRow.of(r) for r in rows]


async def runs(store: Store, schedule_id: str, limit: int = KEEP_RUNS) -> list[RunRow]:
    rows = await store.fetchall(
        f"SELECT {RUN_COLUMNS} FROM schedule_runs WHERE schedule_id = ?"
        " ORDER BY due_at DESC LIMIT ?",
        (schedule_id, limit),
    )
    return [RunRow(**r) for r in rows]


def record(schedule_id: str, expected_next: int, next_run_at: int | None, run: RunRow) -> Any:
    """A transaction function: advance the schedule from ``expected_next`` to
    ``next_run_at`` and store ``run``, only if the schedule still expects that occurrence
    (compare-and-set; True when it did, False when the row moved or went away)."""

    def write(tx: Tx) -> bool:
        error = run.detail if run.outcome == "error" else None
        fired = run.fired_at if run.outcome == "created" else None
        moved = tx.execute(
            "UPDATE schedules SET next_run_at = ?, last_error = ?,"
            " last_run_at = COALESCE(?, last_run_at) WHERE id = ? AND next_run_at = ?",
            (next_run_at, error, fired, schedule_id, expected_next),
        )
        if moved != 1:
            return False
        tx.execute(
            f"INSERT INTO schedule_runs ({RUN_COLUMNS}) VALUES (?,?,?,?,?,?,?)"
            " ON CONFLICT (schedule_id, due_at) DO NOTHING",
            (
                run.schedule_id,
                run.due_at,
                run.fired_at,
                run.outcome,
                run.ref,
                run.status,
                run.detail,
            ),
        )
        tx.execute(
            "DELETE FROM schedule_runs WHERE schedule_id = ? AND due_at < ("
            " SELECT MIN(due_at) FROM (SELECT due_at FROM schedule_runs WHERE schedule_id = ?"
            " ORDER BY due_at DESC LIMIT ?) AS kept)",
            (schedule_id, schedule_id, KEEP_RUNS),
        )
        return True

    return write
