"""The audit trail from a route: ``runplane/auth/audit.py`` with the current request's
store, principal and client ip filled in (so call sites stay one line)."""

from __future__ import annotations

from typing import Any

from quart import has_request_context, request

from runplane.auth import audit
from runplane.auth.audit import ArrayEntry, Entry
from runplane.http.auth_hook import current_principal
from runplane.http.context import Services, services
from runplane.jobs.rows import JobRow
from runplane.persistence import Store


def by() -> audit.By:
    """The current request's principal and client address."""
    return audit.By(current_principal(), request.remote_addr if has_request_context() else None)


def _store() -> Store:
    return services().store


async def record(
    action: str,
    resource_type: str,
    resource_id: str,
    *,
    org_id: str | None = None,
    after: Any = None,
) -> None:
    """Record an action of the current request's principal (never fails the request)."""
    await audit.record(
        _store(), by(), action, resource_type, resource_id, org_id=org_id, after=after
    )


async def record_job(action: str, row: JobRow, **extra: Any) -> None:
    await audit.record_job(_store(), by(), action, row, **extra)


def job_entry(action: str, **extra: Any) -> Entry | None:
    """The request's audit row for a job about to be created (its insert transaction)."""
    return audit.job_entry(_store(), by(), action, **extra)


def job_entry_of(svc: Services, who: audit.By, action: str) -> Entry | None:
    """``who``'s audit row for a job about to be created, outside Quart's request context
    (the lean lanes, docs/lean-lanes.md)."""
    return audit.job_entry(svc.store, who, action)


def array_entry_of(svc: Services, who: audit.By, action: str) -> ArrayEntry | None:
    """``who``'s audit row for a job array about to be created (as above)."""
    return audit.array_entry(svc.store, who, action)
