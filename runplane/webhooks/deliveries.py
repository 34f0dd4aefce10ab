"""Webhook deliveries: one row per (event, endpoint), written before any attempt.

A run's deliveries are inserted by :func:`fire` inside the transaction that stores the
run's end (``runplane/jobs/repo.py`` ``save_state(also=...)``), so a run that ended has
its deliveries, or neither happened: a crash in between loses nothing and fires nothing
twice. The dispatcher (``runplane/actors/webhooks.py``) attempts the pending ones and
writes each attempt's outcome (:func:`record`) before the next one is scheduled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from runplane.ids import new_id
from runplane.persistence import Store, Tx, now_ms, to_json
from runplane.timefmt import iso_ms

DELIVERY_PREFIX = "dlv_"
PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"
#: What a row delivers: a webhook message, or a commit status to a git provider (its
#: ``endpoint_id`` is then the git connection; docs/git.md#commit-statuses)
WEBHOOK, GIT_STATUS = "webhook", "git_status"
#: The synthetic event of ``POST /v1/webhooks/{id}/test`` (no run).
PING = "ping"
#: A run's end phase -> its event (a timeout is a failure: conventions).
EVENT_OF = {
    "succeeded": "run.succeeded",
    "failed": "run.failed",
    "timeout": "run.failed",
    "cancelled": "run.cancelled",
}
#: Recent deliveries listed per endpoint.
LIST_LIMIT = 100
_INSERT = (
    "INSERT INTO webhook_deliveries (id, endpoint_id, org_id, event, job_id, run, status,"
    " attempts, response_code, error, next_at, created_at, updated_at)"
    " VALUES (?,?,?,?,?,?,?,0,0,'',?,?,?)"
)


def fire(org_id: str, job_id: str, event: str, run: Mapping[str, Any]) -> Callable[[Tx], int]:
    """The transaction part that queues ``event`` of run ``job_id`` to every enabled
    endpoint of ``org_id`` that receives it (how many)."""
    run_json = to_json(dict(run))

    def insert(tx: Tx) -> int:
        rows = tx.fetchall(
            "SELECT id, events FROM webhook_endpoints WHERE org_id = ? AND enabled = 1",
            (org_id,),
        )
        now = now_ms()
        stamps = (now, now, now)  # next_at (due at once), created_at, updated_at
        params = [
            (new_id(DELIVERY_PREFIX), r["id"], org_id, event, job_id, run_json, PENDING, *stamps)
            for r in rows
            if event in r["events"].split(",")
        ]
        if params:
            tx.execute_many(_INSERT, params)
        return len(params)

    return insert


def fire_status(
    connection_id: str, org_id: str, job_id: str, state: str, detail: Mapping[str, Any]
) -> Callable[[Tx], int]:
    """The transaction part that queues a commit status (``state``: pending, success,
    failure, error) for a job cloned from ``connection_id``, unless that connection has
    ``report_status`` off (1 queued, else 0)."""
    detail_json = to_json(dict(detail))

    def insert(tx: Tx) -> int:
        row = tx.fetchone(
            "SELECT report_status FROM git_connections WHERE id = ? AND org_id = ?",
            (connection_id, org_id),
        )
        if row is None or not row["report_status"]:
            return 0
        now = now_ms()
        tx.execute(
            "INSERT INTO webhook_deliveries (id, endpoint_id, org_id, event, job_id, run, status,"
            " attempts, response_code, error, next_at, created_at, updated_at, kind)"
            " VALUES (?,?,?,?,?,?,?,0,0,'',?,?,?,?)",
            (
                new_id(DELIVERY_PREFIX),
                connection_id,
                org_id,
                state,
                job_id,
                detail_json,
                PENDING,
                now,
                now,
                now,
                GIT_STATUS,
            ),
        )
        return 1

    return insert


async def queue_ping(store: Store, endpoint_id: str, org_id: str) -> str:
    """A synthetic ``ping`` delivery to one endpoint (``POST /v1/webhooks/{id}/test``)."""
    delivery_id = new_id(DELIVERY_PREFIX)
    now = now_ms()
    await store.execute(
        _INSERT, (delivery_id, endpoint_id, org_id, PING, None, None, PENDING, now, now, now)
    )
    return delivery_id


@dataclass(frozen=True, slots=True)
class Delivery:
    id: str
    endpoint_id: str
    org_id: str
    event: str
    job_id: str | None
    run: str | None  # the run object's JSON, as fired
    status: str
    attempts: int
    response_code: int
    error: str
    next_at: int | None
    created_at: int
    updated_at: int
    kind: str

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Delivery:
        return cls(**{name: row[name] for name in cls.__slots__})

    def view(self) -> dict[str, Any]:
        """WebhookDelivery (plus ``job_id`` and ``next_attempt_at``, additions)."""
        return {
            "id": self.id,
            "endpoint_id": self.endpoint_id,
            "event": self.event,
            "status": self.status,
            "attempts": self.attempts,
            "response_code": self.response_code,
            "error": self.error,
            "job_id": self.job_id,
            "next_attempt_at": (
                iso_ms(self.next_at)
                if self.status == PENDING and self.next_at is not None
                else None
            ),
            "created_at": iso_ms(self.created_at),
            "updated_at": iso_ms(self.updated_at),
        }


_COLUMNS = ", ".join(Delivery.__slots__)


async def get(store: Store, delivery_id: str) -> Delivery | None:
    row = await store.fetchone(
        f"SELECT {_COLUMNS} FROM webhook_deliveries WHERE id = ?", (delivery_id,)
    )
    return None if row is None else Delivery.of(row)


async def recent(store: Store, endpoint_id: str, limit: int = LIST_LIMIT) -> list[Delivery]:
    rows = await store.fetchall(
        f"SELECT {_COLUMNS} FROM webhook_deliveries WHERE endpoint_id = ? ORDER BY id DESC LIMIT ?",
        (endpoint_id, limit),
    )
    return [Delivery.of(r) for r in rows]


@dataclass(frozen=True, slots=True)
class Due:
    """What the dispatcher keeps of a pending delivery."""

    id: str
    endpoint_id: str
    next_at: int


async def pending(store: Store, *, after_id: str | None = None) -> list[Due]:
    """Pending deliveries (all, or those with an id after ``after_id``: new ones)."""
    if after_id is None:
        rows = await store.fetchall(
            "SELECT id, endpoint_id, next_at FROM webhook_deliveries WHERE status = ? ORDER BY id",
            (PENDING,),
        )
    else:
        rows = await store.fetchall(
            "SELECT id, endpoint_id, next_at FROM webhook_deliveries WHERE status = ?"
            " AND id > ? ORDER BY id",
            (PENDING, after_id),
        )
    return [Due(r["id"], r["endpoint_id"], r["next_at"] or 0) for r in rows]


async def record(
    store: Store,
    delivery_id: str,
    *,
    status: str,
    attempts: int,
    response_code: int,
    error: str,
    next_at: int | None,
) -> None:
    """One attempt's outcome (durable before the next attempt is scheduled)."""
    await store.execute(
        "UPDATE webhook_deliveries SET status = ?, attempts = ?, response_code = ?, error = ?,"
        " next_at = ?, updated_at = ? WHERE id = ?",
        (status, attempts, response_code, error[:1000], next_at, now_ms(), delivery_id),
    )


def delete_of_endpoint(tx: Tx, endpoint_id: str) -> None:
    """Every delivery of an endpoint being deleted (``endpoints.delete``, in its
    transaction: pending ones are never attempted)."""
    tx.execute("DELETE FROM webhook_deliveries WHERE endpoint_id = ?", (endpoint_id,))
