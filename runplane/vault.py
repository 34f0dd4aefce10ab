"""Org secrets (``/v1/secrets``, docs/secrets.md): named values an org's jobs reference in
their env as ``${secrets.NAME}``.

A value is sealed at rest (AES-256-GCM, ``<org>/<name>`` as associated data: a value
copied to another org's row does not open) and never shown again: listings give names,
timestamps and who set them. A job's env keeps the reference; the value is put in only
when the run order of an attempt is built, goes to the agent for that attempt, and the
agent masks it (``***``) in the job's log lines and stream chunks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from runplane.persistence import Store, now_ms
from runplane.problems import FieldProblem, Problem
from runplane.sealed_env import REF
from runplane.sealing import Sealer
from runplane.timefmt import iso_ms

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"
_NAME = re.compile(NAME_PATTERN)
MAX_VALUE = 64 * 1024
#: Values shorter than this are not masked in logs (masking every "a" helps nobody).
MIN_MASKED = 3


class SecretBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    value: str = Field(min_length=1, max_length=MAX_VALUE)


@dataclass(frozen=True, slots=True)
class SecretInfo:
    name: str
    org_id: str
    created_by: str
    created_at: int
    updated_by: str
    updated_at: int

    def view(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "org_id": self.org_id,
            "created_by": self.created_by,
            "created_at": iso_ms(self.created_at),
            "updated_by": self.updated_by,
            "updated_at": iso_ms(self.updated_at),
        }


def check_name(name: str) -> str:
    if not _NAME.match(name):
        message = "a secret name is letters, digits and '_' (not first a digit), at most 64"
        raise Problem(400, "invalid_name", message, [FieldProblem("name", "invalid", message)])
    return name


def references(env: Mapping[str, Any]) -> dict[str, list[str]]:
    """env variable -> the secret names its value references."""
    out: dict[str, list[str]] = {}
    for var, value in env.items():
        if isinstance(value, str):
            names = REF.findall(value)
            if names:
                out[var] = names
    return out


def references_in(
    env: Mapping[str, Any], services: Iterable[tuple[str, Mapping[str, Any]]] = ()
) -> dict[str, list[str]]:
    """Where a job references org secrets: ``env.VAR`` of its ``env`` and, for a session's
    pod, ``pod.<service>.env.VAR`` of each ``(service name, env)`` -> the secret names."""
    out = {f"env.{var}": names for var, names in references(env).items()}
    for name, service_env in services:
        for var, names in references(service_env).items():
            out[f"pod.{name}.env.{var}"] = names
    return out


def doc_references(doc: Mapping[str, Any]) -> dict[str, list[str]]:
    """:func:`references_in` of a stored body (a schedule's job, a pipeline's stage)."""
    services = ((s["name"], s.get("env") or {}) for s in doc.get("pod") or ())
    return references_in(doc.get("env") or {}, services)


def substitute(env: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """``env`` with each ``${secrets.NAME}`` replaced by its value (unknown ones kept)."""
    return {
        var: REF.sub(lambda m: values.get(m.group(1), m.group(0)), value)
        for var, value in env.items()
    }


def maskable(values: Iterable[str]) -> list[str]:
    """What the agent masks: the values long enough, longest first."""
    return sorted({v for v in values if len(v) >= MIN_MASKED}, key=len, reverse=True)


_COLUMNS = "name, org_id, created_by, created_at, updated_by, updated_at"


async def put(
    store: Store, sealer: Sealer, org_id: str, name: str, value: str, by: str
) -> tuple[SecretInfo, bool]:
    """Set (or replace) a secret; whether it is new."""
    sealed = sealer.seal(value, aad=f"{org_id}/{name}")
    now = now_ms()
    old = await store.fetchone(
        "SELECT created_by, created_at FROM org_secrets WHERE org_id = ? AND name = ?",
        (org_id, name),
    )
    await store.execute(
        "INSERT INTO org_secrets (org_id, name, value, created_by, created_at, updated_by,"
        " updated_at) VALUES (?,?,?,?,?,?,?) ON CONFLICT (org_id, name) DO UPDATE SET"
        " value = excluded.value, updated_by = excluded.updated_by,"
        " updated_at = excluded.updated_at",
        (org_id, name, sealed, by, now, by, now),
    )
    created_by, created_at = (old["created_by"], old["created_at"]) if old else (by, now)
    return SecretInfo(name, org_id, created_by, created_at, by, now), old is None


async def listing(store: Store, org_id: str | None) -> list[SecretInfo]:
    if org_id is None:
        rows = await store.fetchall(f"SELECT {_COLUMNS} FROM org_secrets ORDER BY org_id, name", ())
    else:
        rows = await store.fetchall(
            f"SELECT {_COLUMNS} FROM org_secrets WHERE org_id = ? ORDER BY name", (org_id,)
        )
    return [SecretInfo(**dict(r)) for r in rows]


async def delete(store: Store, org_id: str, name: str) -> bool:
    found = await store.fetchone(
        "SELECT name FROM org_secrets WHERE org_id = ? AND name = ?", (org_id, name)
    )
    if found is None:
        return False
    await store.execute("DELETE FROM org_secrets WHERE org_id = ? AND name = ?", (org_id, name))
    return True


async def check_refs(store: Store, refs: Mapping[str, list[str]], org_id: str) -> None:
    """At submit: every secret a job references (``references_in``: its env, its pod
    services' env) exists in the job's org (422 naming the first that does not; another
    org's is as unknown as none)."""
    if not refs:
        return
    names = sorted({n for ns in refs.values() for n in ns})
    rows = await store.fetchall(
        f"SELECT name FROM org_secrets WHERE org_id = ? AND name IN ({','.join('?' * len(names))})",
        (org_id, *names),
    )
    have = {r["name"] for r in rows}
    for key, wanted in refs.items():
        for name in wanted:
            if name not in have:
                message = (
                    f"{key}: no secret {name!r} in this org; set it with PUT /v1/secrets/{name}"
                )
                raise Problem(
                    422, "unknown_secret", message, [FieldProblem(key, "unknown_secret", message)]
                )


async def values(store: Store, sealer: Sealer, org_id: str, names: Iterable[str]) -> dict[str, str]:
    """The values of ``names`` in ``org_id`` (the ones that exist), unsealed."""
    wanted = sorted(set(names))
    if not wanted:
        return {}
    marks = ",".join("?" * len(wanted))
    rows = await store.fetchall(
        f"SELECT name, value FROM org_secrets WHERE org_id = ? AND name IN ({marks})",
        (org_id, *wanted),
    )
    return {r["name"]: sealer.open(r["value"], aad=f"{org_id}/{r['name']}") for r in rows}
