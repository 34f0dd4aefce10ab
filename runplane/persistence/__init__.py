"""Persistence: one async :class:`Store` interface, three backends.

    store = open_store(settings.database_url, settings.data_dir)
    async with store:
        await store.execute("INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)",
                            ("instance_id", "abc", now_ms()))
        row = await store.fetchone("SELECT value FROM meta WHERE key = ?", ("instance_id",))

See docs/persistence.md.
"""

from __future__ import annotations

from pathlib import Path

from runplane.persistence.errors import (
    StoreClosedError,
    StoreFullError,
    StoreUnavailableError,
    TransactionAbortedError,
    WriteBatchError,
)
from runplane.persistence.migrate import (
    Migration,
    MigrationError,
    NewerStoreError,
    load_migrations,
)
from runplane.persistence.store import (
    Params,
    Row,
    Store,
    StoreKind,
    StoreStatistics,
    Tx,
    from_json,
    is_integrity_error,
    now_ms,
    to_json,
)

__all__ = [
    "DB_FILENAME",
    "Migration",
    "MigrationError",
    "NewerStoreError",
    "Params",
    "Row",
    "Store",
    "StoreClosedError",
    "StoreFullError",
    "StoreKind",
    "StoreStatistics",
    "StoreUnavailableError",
    "TransactionAbortedError",
    "Tx",
    "WriteBatchError",
    "from_json",
    "is_integrity_error",
    "load_migrations",
    "now_ms",
    "open_store",
    "to_json",
]

#: the embedded SQLite database file inside RUNPLANE_DATA_DIR
DB_FILENAME = "runplane.db"


def _describe(url: str) -> str:
    # never echo a whole URL: it may carry a password
    if "://" in url:
        return f"a URL with scheme {url.split('://', 1)[0]!r}"
    return repr(url if len(url) <= 40 else url[:37] + "...")


def open_store(database_url: str | None, data_dir: Path) -> Store:
    """Build the store RUNPLANE_DATABASE_URL asks for (not yet open: ``await store.open()``
    or ``async with store``).

    * ``None`` (unset) or empty: the embedded SQLite file ``data_dir/runplane.db``
      (the directory is created on open);
    * ``"memory"``: no database, nothing survives a restart;
    * ``postgresql://...`` or ``postgres://...``: PostgreSQL.

    Anything else raises ValueError naming RUNPLANE_DATABASE_URL and the accepted forms.
    """
    url = (database_url or "").strip()
    if not url:
        from runplane.persistence.sqlite import SQLiteStore

        return SQLiteStore(Path(data_dir) / DB_FILENAME)
    if url.lower() == "memory":
        from runplane.persistence.sqlite import MemoryStore

        return MemoryStore()
    if url.lower().startswith(("postgresql://", "postgres://")):
        from runplane.persistence.postgres import PostgresStore

        return PostgresStore(url)
    raise ValueError(
        f"RUNPLANE_DATABASE_URL is {_describe(url)}, which is not supported; accepted: "
        "unset (embedded SQLite file in RUNPLANE_DATA_DIR), 'memory' (no database, "
        "nothing survives a restart), or 'postgresql://user:password@host:port/dbname' "
        "(also 'postgres://...')"
    )
