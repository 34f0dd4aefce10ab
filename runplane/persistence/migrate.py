"""Schema migrations: numbered SQL files applied in order at ``Store.open()``.

Files live in ``runplane/persistence/migrations/`` (shipped as package data):

* ``NNNN_name.sql``: portable SQL, used by every dialect;
* ``NNNN_name.sqlite.sql`` / ``NNNN_name.postgres.sql``: a dialect variant. When
  a variant exists for the store's dialect it is used INSTEAD of the portable
  file of the same version (the memory backend uses the ``sqlite`` variant).

Each migration runs in its own transaction together with its row in
``schema_migrations(version, name, applied_at)``. Concurrent openers are
serialized by a database-wide lock taken before re-checking whether the version
is applied (SQLite: ``BEGIN IMMEDIATE``; PostgreSQL: ``pg_advisory_xact_lock``),
so two processes starting at once never double-apply and both succeed.

A store with a migration this version does not ship (a newer runplane migrated it) is
refused with :class:`NewerStoreError` before anything is applied: an older server never
runs on a newer schema (docs/operations.md "Upgrading").
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runplane.persistence.store import Dialect

log = logging.getLogger(__name__)

SQL_DIALECTS = ("sqlite", "postgres")
_FILE_RE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+?)(?:\.(?P<variant>[a-z]+))?\.sql$")


class MigrationError(RuntimeError):
    """A migration file is malformed, or applying one failed."""


class NewerStoreError(MigrationError):
    """The store has migrations this version does not know: a newer runplane wrote it.

    Raised before anything is applied, so the store is left as it was. ``store`` is the
    highest version the store has, ``known`` the highest this version ships."""

    def __init__(self, store: int, known: int) -> None:
        super().__init__(
            f"the store is at schema {store:04d}, newer than this version's {known:04d} "
            "(written by a newer runplane)"
        )
        self.store = store
        self.known = known


@dataclass(frozen=True, slots=True, order=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def load_migrations(source: Traversable | Path | None = None, *, dialect: str) -> list[Migration]:
    """Read the migrations of ``source`` (default: the packaged directory) for ``dialect``.

    Returns them sorted by version. Raises :class:`MigrationError` on a badly
    named ``.sql`` file, two names for one version, or a version with no SQL
    for ``dialect``.
    """
    if dialect not in SQL_DIALECTS:
        raise ValueError(f"unknown SQL dialect {dialect!r}; expected one of {SQL_DIALECTS}")
    root: Traversable | Path = (
        source if source is not None else resources.files("runplane.persistence") / "migrations"
    )
    names: dict[int, str] = {}
    texts: dict[int, dict[str | None, str]] = {}
    for entry in root.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        m = _FILE_RE.match(entry.name)
        if m is None:
            raise MigrationError(
                f"migration file {entry.name!r} is not named NNNN_name.sql "
                "(or NNNN_name.sqlite.sql / NNNN_name.postgres.sql)"
            )
        version, name, variant = int(m["version"]), m["name"], m["variant"]
        if variant is not None and variant not in SQL_DIALECTS:
            raise MigrationError(
                f"migration file {entry.name!r}: unknown dialect variant {variant!r}"
            )
        if names.setdefault(version, name) != name:
            raise MigrationError(
                f"migration version {version:04d} has two names: {names[version]!r}, {name!r}"
            )
        texts.setdefault(version, {})[variant] = entry.read_text(encoding="utf-8")
    out: list[Migration] = []
    for version in sorted(texts):
        variants = texts[version]
        sql = variants.get(dialect, variants.get(None))
        if sql is None:
            raise MigrationError(
                f"migration {version:04d}_{names[version]} has no portable file and no "
                f"{dialect} variant"
            )
        out.append(Migration(version, names[version], sql))
    return out


def _applied_versions(conn: Any, dialect: Dialect) -> set[int]:
    if not dialect.table_exists(conn, "schema_migrations"):
        return set()
    rows = conn.execute("SELECT version FROM schema_migrations").fetchall()
    return {int(row["version"]) for row in rows}


def apply_migrations(conn: Any, dialect: Dialect, migrations: list[Migration]) -> list[int]:
    """Apply the pending ``migrations`` on ``conn`` (autocommit mode); return the versions applied.

    Safe to run concurrently from several processes on the same database.
    """
    migrations = sorted(migrations)
    applied = _applied_versions(conn, dialect)  # fast path: no lock when up to date
    known = {m.version for m in migrations}
    if unknown := sorted(applied - known):
        raise NewerStoreError(max(unknown), max(known, default=0))
    done: list[int] = []
    for migration in migrations:
        if migration.version in applied:
            continue
        dialect.begin_migration(conn)  # takes the cross-process lock
        try:
            if migration.version in _applied_versions(conn, dialect):
                conn.execute("ROLLBACK")  # another process applied it meanwhile
                continue
            dialect.run_script(conn, migration.sql)
            if not dialect.table_exists(conn, "schema_migrations"):
                raise MigrationError("schema_migrations does not exist (0001 must create it)")
            conn.execute(
                dialect.sql(
                    "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)"
                ),
                (migration.version, migration.name, time.time_ns() // 1_000_000),
            )
            conn.execute("COMMIT")
        except BaseException as exc:
            try:
                conn.execute("ROLLBACK")
            except Exception:
                log.debug("rollback after failed migration failed", exc_info=True)
            if isinstance(exc, Exception) and not isinstance(exc, MigrationError):
                raise MigrationError(f"migration {migration.label} failed: {exc}") from exc
            raise
        log.info("applied migration %s", migration.label)
        done.append(migration.version)
    return done
