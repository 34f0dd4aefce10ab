"""Child process for the multi-process tests (run as a script, not collected).

    python _child.py ack  URL DATA_DIR ROW_ID      write a row, print "acked", then hang
    python _child.py migrate URL DATA_DIR [MIGRATIONS_DIR]
        print "ready", wait for a line on stdin, open (= migrate) the store,
        print the versions it applied as JSON, close

URL "-" means unset (embedded SQLite in DATA_DIR).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from runplane.persistence import Store, load_migrations, now_ms, open_store
from runplane.persistence.postgres import PostgresStore
from runplane.persistence.sqlite import SQLiteStore


def make_store(url: str | None, data_dir: Path, migrations_dir: Path | None) -> Store:
    store = open_store(url, data_dir)
    if migrations_dir is None:
        return store
    if isinstance(store, PostgresStore):
        return PostgresStore(
            url or "", migrations=load_migrations(migrations_dir, dialect="postgres")
        )
    assert isinstance(store, SQLiteStore)
    return SQLiteStore(store.path, migrations=load_migrations(migrations_dir, dialect="sqlite"))


async def ack(url: str | None, data_dir: Path, row_id: str) -> None:
    store = open_store(url, data_dir)
    await store.open()
    await store.execute(
        "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)", (row_id, "acked", now_ms())
    )
    print("acked", flush=True)
    await trio.sleep_forever()  # killed here with SIGKILL: no close(), no flush


async def migrate(url: str | None, data_dir: Path, migrations_dir: Path | None) -> None:
    store = make_store(url, data_dir, migrations_dir)
    print("ready", flush=True)
    await trio.to_thread.run_sync(sys.stdin.readline)
    await store.open()
    applied = getattr(store, "applied_migrations", [])
    await store.close()
    print(json.dumps(applied), flush=True)


def main() -> None:
    mode, raw_url, data_dir = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    url = None if raw_url == "-" else raw_url
    if mode == "ack":
        trio.run(ack, url, data_dir, sys.argv[4])
    elif mode == "migrate":
        extra = Path(sys.argv[4]) if len(sys.argv) > 4 else None
        trio.run(migrate, url, data_dir, extra)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main()
