"""Migrations: applied once, recorded, variants, failures, concurrent processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from runplane.persistence import Migration, MigrationError, Store, load_migrations, open_store
from runplane.persistence.postgres import PostgresStore
from runplane.persistence.sqlite import SQLiteStore

CHILD = Path(__file__).with_name("_child.py")
PACKAGED = load_migrations(dialect="sqlite")


def store_with(url: str | None, data_dir: Path, migrations: list[Migration]) -> Store:
    """A store of the backend ``url`` names, with an explicit migration list."""
    base = open_store(url, data_dir)
    if isinstance(base, PostgresStore):
        assert url is not None
        return PostgresStore(url, migrations=migrations)
    assert isinstance(base, SQLiteStore)
    return SQLiteStore(base.path, migrations=migrations)


def write_dir(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


def packaged_files() -> dict[str, str]:
    return {f"{m.label}.sql": m.sql for m in PACKAGED}


def test_packaged_migrations_are_well_formed() -> None:
    for dialect in ("sqlite", "postgres"):
        migrations = load_migrations(dialect=dialect)
        assert migrations[0].version == 1 and migrations[0].name == "init"
        assert [m.version for m in migrations] == sorted({m.version for m in migrations})


def test_variant_files_override_the_portable_one(tmp_path: Path) -> None:
    root = write_dir(
        tmp_path / "m",
        {
            "0001_init.sql": "-- portable 1",
            "0002_flavour.sql": "-- portable 2",
            "0002_flavour.postgres.sql": "-- postgres 2",
            "0003_only_pg.postgres.sql": "-- pg 3",
            "0003_only_pg.sqlite.sql": "-- sqlite 3",
            "README.md": "ignored",
        },
    )
    pg = load_migrations(root, dialect="postgres")
    lite = load_migrations(root, dialect="sqlite")
    assert [(m.version, m.name, m.sql) for m in pg] == [
        (1, "init", "-- portable 1"),
        (2, "flavour", "-- postgres 2"),
        (3, "only_pg", "-- pg 3"),
    ]
    assert [m.sql for m in lite] == ["-- portable 1", "-- portable 2", "-- sqlite 3"]


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"1_init.sql": ""}, "is not named"),
        ({"0001_Init.sql": ""}, "is not named"),
        ({"0001_init.mysql.sql": ""}, "unknown dialect variant"),
        ({"0001_init.sql": "", "0001_other.sql": ""}, "two names"),
        ({"0001_init.postgres.sql": ""}, "no portable file and no sqlite variant"),
    ],
)
def test_malformed_migration_dirs_are_refused(
    tmp_path: Path, files: dict[str, str], message: str
) -> None:
    with pytest.raises(MigrationError, match=message):
        load_migrations(write_dir(tmp_path / "m", files), dialect="sqlite")


async def test_migrations_applied_and_recorded(
    durable_store_url: str | None, data_dir: Path
) -> None:
    store = open_store(durable_store_url, data_dir)
    async with store:
        assert getattr(store, "applied_migrations", None) == [m.version for m in PACKAGED]
        rows = await store.fetchall(
            "SELECT version, name, applied_at FROM schema_migrations ORDER BY version"
        )
        assert [(r["version"], r["name"]) for r in rows] == [(m.version, m.name) for m in PACKAGED]
        assert all(r["applied_at"] > 1_600_000_000_000 for r in rows)
        # 0001's meta table is there
        await store.execute(
            "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, ?)", ("instance", "x", 1)
        )

    again = open_store(durable_store_url, data_dir)
    async with again:
        assert getattr(again, "applied_migrations", None) == []  # a no-op
        assert (
            await again.fetchall(
                "SELECT version, name, applied_at FROM schema_migrations ORDER BY version"
            )
            == rows
        )
        assert await again.fetchone("SELECT value FROM meta WHERE key = ?", ("instance",)) == {
            "value": "x"
        }


async def test_memory_store_migrates_every_open() -> None:
    store = open_store("memory", Path("/nonexistent"))
    async with store:
        rows = await store.fetchall("SELECT version FROM schema_migrations")
        assert [r["version"] for r in rows] == [m.version for m in PACKAGED]


async def test_new_migration_applies_on_next_open_and_variants_per_dialect(
    durable_store_url: str | None, data_dir: Path, tmp_path: Path
) -> None:
    async with open_store(durable_store_url, data_dir):
        pass
    files = packaged_files() | {
        "9001_flavour.sql": (
            "INSERT INTO meta (key, value, updated_at) VALUES ('flavour', 'portable', 0);"
        ),
        "9001_flavour.sqlite.sql": (
            "CREATE TABLE t9001 (id TEXT PRIMARY KEY);\n"
            "CREATE TRIGGER t9001_ins AFTER INSERT ON t9001 BEGIN\n"
            "  INSERT INTO meta (key, value, updated_at) VALUES ('trigger;' || new.id, 'x', 0);\n"
            "END;\n"
            "INSERT INTO meta (key, value, updated_at) VALUES ('flavour', 'sqlite; yes', 0);"
        ),
    }
    root = write_dir(tmp_path / "m", files)
    dialect = "postgres" if durable_store_url else "sqlite"
    store = store_with(durable_store_url, data_dir, load_migrations(root, dialect=dialect))
    async with store:
        assert getattr(store, "applied_migrations", None) == [9001]
        row = await store.fetchone("SELECT value FROM meta WHERE key = 'flavour'")
        expected = "portable" if dialect == "postgres" else "sqlite; yes"
        assert row == {"value": expected}
        versions = await store.fetchall("SELECT version FROM schema_migrations ORDER BY version")
        assert [r["version"] for r in versions] == [*(m.version for m in PACKAGED), 9001]


async def test_failed_migration_rolls_back_and_is_not_recorded(
    durable_store_url: str | None, data_dir: Path, tmp_path: Path
) -> None:
    bad = packaged_files() | {
        "9002_broken.sql": "CREATE TABLE half (id TEXT);\nINSERT INTO no_such_table VALUES (1);\n"
    }
    dialect = "postgres" if durable_store_url else "sqlite"
    store = store_with(
        durable_store_url,
        data_dir,
        load_migrations(write_dir(tmp_path / "bad", bad), dialect=dialect),
    )
    with pytest.raises(MigrationError, match="9002_broken"):
        await store.open()
    # fixed on the next deploy: the packaged ones stayed applied, 9002 runs cleanly now
    good = packaged_files() | {"9002_broken.sql": "CREATE TABLE half (id TEXT);\n"}
    store = store_with(
        durable_store_url,
        data_dir,
        load_migrations(write_dir(tmp_path / "good", good), dialect=dialect),
    )
    async with store:
        assert getattr(store, "applied_migrations", None) == [9002]
        await store.execute("INSERT INTO half (id) VALUES (?)", ("ok",))


def test_two_processes_migrating_at_once(
    durable_store_url: str | None, data_dir: Path, tmp_path: Path
) -> None:
    # the packaged migrations plus slow-ish extra ones, raced by 4 processes
    extra = {
        f"{9000 + k:04d}_extra_{k}.sql": (
            f"CREATE TABLE extra_{k} (id INTEGER PRIMARY KEY, v TEXT);\n"
            + "".join(f"INSERT INTO extra_{k} (id, v) VALUES ({i}, 'r{i}');\n" for i in range(200))
        )
        for k in range(5)
    }
    root = write_dir(tmp_path / "m", packaged_files() | extra)
    url_arg = durable_store_url or "-"
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), "migrate", url_arg, str(data_dir), str(root)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    try:
        for p in procs:
            assert p.stdout is not None
            assert p.stdout.readline().strip() == "ready"
        for p in procs:  # release them together
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        results = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    for p, (_out, err) in zip(procs, results, strict=True):
        assert p.returncode == 0, err
    applied = [v for out, _ in results for v in json.loads(out.strip().splitlines()[-1])]
    expected = [m.version for m in PACKAGED] + [9000 + k for k in range(5)]
    assert sorted(applied) == sorted(expected)  # each version applied by exactly one process

    import trio

    async def check() -> None:
        dialect = "postgres" if durable_store_url else "sqlite"
        store = store_with(durable_store_url, data_dir, load_migrations(root, dialect=dialect))
        async with store:
            assert getattr(store, "applied_migrations", None) == []
            rows = await store.fetchall("SELECT version FROM schema_migrations ORDER BY version")
            assert [r["version"] for r in rows] == sorted(expected)
            for k in range(5):
                assert await store.fetchone(f"SELECT count(*) AS n FROM extra_{k}") == {"n": 200}

    trio.run(check)
