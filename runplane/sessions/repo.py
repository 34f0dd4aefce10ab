"""Sessions in the store: one ``sessions`` row each (its pod job carries ``session_id``).
The row is inserted in the pod job's own insert transaction (``insert_sql``), so a session
never exists without its job nor a job without its session; the session actor writes its
state (``save``) before it answers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runplane.persistence import Row, Store, Tx, from_json, now_ms, to_json
from runplane.persistence.revocable import newest_page

from .machine import Phase, SessionState

COLUMNS = (
    "id, org_id, project, name, submitted_by, job_id, phase, idle_ttl_sec, services, actions, "
    "teleop_stream, error, created_at, last_keepalive, started_at, stopped_at, updated_at"
)


@dataclass(frozen=True, slots=True)
class SessionRow:
    id: str
    org_id: str
    project: str
    name: str
    submitted_by: str
    job_id: str
    idle_ttl_sec: int
    services: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    teleop_stream: str
    created_at: int
    state: SessionState

    @classmethod
    def of(cls, row: Row) -> SessionRow:
        return cls(
            id=row["id"],
            org_id=row["org_id"],
            project=row["project"],
            name=row["name"],
            submitted_by=row["submitted_by"],
            job_id=row["job_id"],
            idle_ttl_sec=int(row["idle_ttl_sec"]),
            services=from_json(row["services"]),
            actions=from_json(row["actions"]),
            teleop_stream=row["teleop_stream"],
            created_at=int(row["created_at"]),
            state=SessionState(
                phase=Phase(row["phase"]),
                idle_ttl_sec=int(row["idle_ttl_sec"]),
                last_keepalive=int(row["last_keepalive"]),
                started_at=row["started_at"],
                stopped_at=row["stopped_at"],
                error=row["error"],
            ),
        )


@dataclass(frozen=True, slots=True)
class NewSession:
    id: str
    org_id: str
    project: str
    name: str
    submitted_by: str
    idle_ttl_sec: int
    services: list[dict[str, Any]]
    actions: list[dict[str, Any]]
    teleop_stream: str


def insert_sql(new: NewSession, job_id: str) -> tuple[str, Sequence[Any]]:
    """The INSERT of a new session (``launching``) whose pod job is ``job_id``."""
    now = now_ms()
    return (
        f"INSERT INTO sessions ({COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            new.id,
            new.org_id,
            new.project,
            new.name,
            new.submitted_by,
            job_id,
            Phase.LAUNCHING.value,
            new.idle_ttl_sec,
            to_json(new.services),
            to_json(new.actions),
            new.teleop_stream,
            None,
            now,
            now,
            None,
            None,
            now,
        ),
    )


def save(session_id: str, state: SessionState) -> Any:
    params = (
        state.phase.value,
        state.last_keepalive,
        state.started_at,
        state.stopped_at,
        state.error,
        now_ms(),
        session_id,
    )

    def write(tx: Tx) -> None:
        tx.execute(
            "UPDATE sessions SET phase = ?, last_keepalive = ?, started_at = ?, stopped_at = ?,"
            " error = ?, updated_at = ? WHERE id = ?",
            params,
        )

    return write


async def get(store: Store, session_id: str, org_id: str | None) -> SessionRow | None:
    """The session, None when there is none or it is not ``org_id``'s (None: any org)."""
    row = await store.fetchone(f"SELECT {COLUMNS} FROM sessions WHERE id = ?", (session_id,))
    if row is None or (org_id is not None and row["org_id"] != org_id):
        return None
    return SessionRow.of(row)


async def list_rows(
    store: Store, org_id: str | None, *, limit: int, offset: int
) -> list[SessionRow]:
    """Newest first."""
    rows = await newest_page(store, "sessions", COLUMNS, org_id, limit=limit, offset=offset)
    return [SessionRow.of(r) for r in rows]


async def live_ids(store: Store) -> list[str]:
    """Sessions not ended (their actors come back at start-up, deadlines intact)."""
    live = [p.value for p in Phase if not p.terminal]
    rows = await store.fetchall(
        f"SELECT id FROM sessions WHERE phase IN ({','.join('?' * len(live))}) ORDER BY id",
        live,
    )
    return [r["id"] for r in rows]


async def job_phase(store: Store, job_id: str) -> tuple[str, str | None] | None:
    row = await store.fetchone("SELECT phase, error FROM jobs WHERE id = ?", (job_id,))
    return None if row is None else (row["phase"], row["error"])


_KEEPALIVE_SQL = (
    "UPDATE sessions SET last_keepalive = ?, updated_at = ? WHERE id = ? AND last_keepalive < ?"
)


async def write_keepalives(store: Store, kept: Mapping[str, int]) -> None:
    """Every session's latest keepalive (session id -> unix ms) in one batch; a row that
    already holds a later one (a phase change written meanwhile) keeps it."""
    now = now_ms()
    await store.execute_many(_KEEPALIVE_SQL, [(at, now, sid, at) for sid, at in kept.items()])


async def visible_ids(store: Store, ids: Sequence[str], org_id: str | None) -> list[SessionRow]:
    """The sessions among ``ids`` that ``org_id`` sees (None: any org), in no order."""
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    params: list[Any] = list(ids)
    sql = f"SELECT {COLUMNS} FROM sessions WHERE id IN ({marks})"
    if org_id is not None:
        sql += " AND org_id = ?"
        params.append(org_id)
    return [SessionRow.of(r) for r in await store.fetchall(sql, params)]
