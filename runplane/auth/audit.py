"""The audit trail: append-only rows of who did what to which resource, from where.

Functions over a store with the acting principal passed in (``By``); routes call them
through ``runplane/http/audit.py``, which fills ``By`` from the current request, in one
line after the action succeeded::

    await audit.record("tokens:mint", "token", view.id, org_id=view.org_id, after=view)
    await audit.record_job("runs:cancel", row)

A job submit writes its row inside the job's insert transaction instead
(``jobs.submit(..., audit=audit.job_entry("runs:submit"))``).

The org is the
resource's (``org_id``, else looked up for known resource types, else the actor's). The
``after`` snapshot is scrubbed of anything secret (:func:`scrub`). Rows are only ever
inserted: there is no update or delete path. Without a database (``memory``) nothing is
recorded and the list is empty (spec).

Actions so far: ``tokens:mint|revoke``, ``join_tokens:mint|revoke``, ``runs:submit|cancel``
(a rerun is a ``runs:submit`` with ``rerun_of``), ``users:seat``, ``orgs:create``,
``members:add|remove``; webhooks and share call the same function.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from runplane.auth.principal import Principal
from runplane.ids import new_id
from runplane.jobs.rows import JobRow
from runplane.persistence import Row, Store, from_json, now_ms, to_json
from runplane.timefmt import iso_ms

log = logging.getLogger("runplane.audit")

AUDIT_ID_PREFIX = "aud_"
LIST_DEFAULT, LIST_MAX = 100, 1000
REDACTED = "[redacted]"

#: Keys whose values never go into a snapshot (compared lowercased, as substrings).
_SECRET_KEYS = ("token", "secret", "password", "passwd", "credential", "private", "cookie")
#: Values shaped like one of our bearer secrets are redacted wherever they appear.
_SECRET_VALUE = re.compile(r"\b(?:rpt|rpl|rps|rpj|rpn|whsec)_[A-Za-z0-9_-]{8,}")

#: Where to find a resource's org when the call site does not pass it.
_ORG_OF: dict[str, str] = {
    "job": "SELECT org_id FROM jobs WHERE id = ?",
    "join_token": "SELECT org_id FROM join_tokens WHERE id = ?",
    "token": "SELECT org_id FROM access_tokens WHERE id = ?",
}


def scrub(value: Any) -> Any:
    """A copy of ``value`` safe to store: secret-named keys dropped to ``[redacted]``,
    secret-shaped strings replaced."""
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key).lower()
            if any(word in name for word in _SECRET_KEYS):
                out[str(key)] = REDACTED
            else:
                out[str(key)] = scrub(item)
        return out
    if isinstance(value, list | tuple):
        return [scrub(item) for item in value]
    if isinstance(value, str):
        return _SECRET_VALUE.sub(REDACTED, value)
    return value


def actor_of(principal: Principal) -> tuple[str, str]:
    """(actor_type, actor_id): ``user | service | node | system``. The anonymous caller of
    an open deploy is recorded as user ``anonymous``."""
    if principal.kind == "anon":
        return "user", "anonymous"
    return principal.kind, principal.subject


@dataclass(frozen=True, slots=True)
class By:
    """Who acted, from where: the request's principal and client ip."""

    principal: Principal
    ip: str | None = None


_INSERT = (
    "INSERT INTO audit_log (id, org_id, actor_type, actor_id, action, resource_type,"
    " resource_id, after, ip, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)

#: An audit row to write inside another transaction: (SQL, parameters) for a job row.
Entry = Callable[[JobRow], tuple[str, tuple[Any, ...]]]


def _params(
    org_id: str,
    actor: Principal,
    action: str,
    resource_type: str,
    resource_id: str,
    after: Any,
    ip: str | None,
) -> tuple[Any, ...]:
    actor_type, actor_id = actor_of(actor)
    snapshot = None if after is None else to_json(scrub(after))
    return (
        new_id(AUDIT_ID_PREFIX),
        org_id,
        actor_type,
        actor_id,
        action,
        resource_type,
        resource_id,
        snapshot,
        ip,
        now_ms(),
    )


async def append(
    store: Store,
    *,
    action: str,
    resource_type: str,
    resource_id: str,
    org_id: str,
    actor: Principal,
    ip: str | None = None,
    after: Any = None,
) -> str | None:
    """Insert one row; its id, or None without a database (memory store)."""
    if not store.supports_identity:
        return None
    params = _params(org_id, actor, action, resource_type, resource_id, after, ip)
    await store.execute(_INSERT, params)
    return str(params[0])


async def record(
    store: Store,
    by: By,
    action: str,
    resource_type: str,
    resource_id: str,
    *,
    org_id: str | None = None,
    after: Any = None,
) -> None:
    """Record an action of ``by``. Never fails the caller: the action already happened,
    so a failed audit write is logged (error) instead."""
    principal, ip = by.principal, by.ip
    if not store.supports_identity:
        return
    try:
        if org_id is None and resource_type in _ORG_OF:
            row = await store.fetchone(_ORG_OF[resource_type], (resource_id,))
            org_id = row["org_id"] if row else None
        await append(
            store,
            action=action,
            resource_type=resource_type,
            resource_id=resource_id,
            org_id=org_id or principal.org_id,
            actor=principal,
            ip=ip,
            after=after,
        )
    except Exception:
        log.exception(
            "audit write failed",
            extra={"action": action, "resource_type": resource_type, "resource_id": resource_id},
        )


def job_snapshot(row: JobRow, **extra: Any) -> dict[str, Any]:
    """What an audit row keeps of a job: no spec (env, command and inputs may hold secrets)."""
    return {
        "stack": row.stack,
        "project": row.project,
        "phase": row.phase.value,
        "priority": row.priority,
        "spec_hash": row.spec_hash,
        "node_id": row.node_id,
        **extra,
    }


async def record_job(store: Store, by: By, action: str, row: JobRow, **extra: Any) -> None:
    """``record`` for a job row (``runs:submit``, ``runs:cancel``, ...)."""
    after = job_snapshot(row, **extra)
    await record(store, by, action, "job", row.id, org_id=row.org_id, after=after)


def job_entry(store: Store, by: By, action: str, **extra: Any) -> Entry | None:
    """The audit row of ``by`` for a job about to be created, written in the job's own
    insert transaction (no job without its row, and no second write per submit); None
    without a database."""
    if not store.supports_identity:
        return None
    principal, ip = by.principal, by.ip

    def entry(row: JobRow) -> tuple[str, tuple[Any, ...]]:
        after = job_snapshot(row, **extra)
        return _INSERT, _params(row.org_id, principal, action, "job", row.id, after, ip)

    return entry


#: The audit row of a job array, written in its insert transaction: (SQL, parameters) for
#: (array id, org id, what it keeps).
ArrayEntry = Callable[[str, str, dict[str, Any]], tuple[str, tuple[Any, ...]]]


def array_entry(store: Store, by: By, action: str) -> ArrayEntry | None:
    """The audit row of ``by`` for a job array about to be created (one row per array,
    naming its jobs); None without a database."""
    if not store.supports_identity:
        return None
    principal, ip = by.principal, by.ip

    def entry(array_id: str, org_id: str, after: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
        return _INSERT, _params(org_id, principal, action, "job_array", array_id, after, ip)

    return entry


def _view(row: Row) -> dict[str, Any]:
    return {
        "id": row["id"],
        "org_id": row["org_id"],
        "actor_type": row["actor_type"],
        "actor_id": row["actor_id"],
        "action": row["action"],
        "resource_type": row["resource_type"],
        "resource_id": row["resource_id"],
        "after": None if row["after"] is None else from_json(row["after"]),
        "ip": row["ip"],
        "created_at": iso_ms(int(row["created_at"])),
    }


async def list_rows(
    store: Store, *, org_id: str | None = None, limit: int = LIST_DEFAULT
) -> list[dict[str, Any]]:
    """AuditRow[] newest first, only ``org_id``'s if given; [] without a database."""
    if not store.supports_identity:
        return []
    order = "ORDER BY created_at DESC, id DESC LIMIT ?"
    if org_id is None:
        rows = await store.fetchall(f"SELECT * FROM audit_log {order}", (limit,))
    else:
        rows = await store.fetchall(
            f"SELECT * FROM audit_log WHERE org_id = ? {order}", (org_id, limit)
        )
    return [_view(row) for row in rows]
