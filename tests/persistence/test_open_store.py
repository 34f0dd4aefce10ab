"""open_store(): RUNPLANE_DATABASE_URL to backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from runplane.persistence import open_store
from runplane.persistence.postgres import PostgresStore, qmark_to_pyformat
from runplane.persistence.sqlite import MemoryStore, SQLiteStore, iter_statements


async def test_unset_is_sqlite_in_the_data_dir(tmp_path: Path) -> None:
    data_dir = tmp_path / "deep" / "data"
    store = open_store(None, data_dir)
    assert isinstance(store, SQLiteStore) and store.kind == "sqlite"
    assert store.path == data_dir / "runplane.db"
    assert not data_dir.exists()
    async with store:
        assert (data_dir / "runplane.db").is_file()
    assert isinstance(open_store("", data_dir), SQLiteStore)


def test_memory_and_postgres(tmp_path: Path) -> None:
    assert isinstance(open_store("memory", tmp_path), MemoryStore)
    assert isinstance(open_store("MEMORY", tmp_path), MemoryStore)
    for url in ("postgresql://u:p@db:5432/runplane", "postgres://db/runplane"):
        store = open_store(url, tmp_path)
        assert isinstance(store, PostgresStore) and store.kind == "postgres"
    assert not any(tmp_path.iterdir())  # nothing is created before open()


@pytest.mark.parametrize(
    "url",
    ["mysql://root:hunter2@db/x", "sqlite:///tmp/x.db", "memory:", "/var/lib/runplane.db", "pg"],
)
def test_bad_urls_are_refused_clearly(tmp_path: Path, url: str) -> None:
    with pytest.raises(ValueError) as info:
        open_store(url, tmp_path)
    message = str(info.value)
    assert "RUNPLANE_DATABASE_URL" in message
    for accepted in ("unset", "'memory'", "postgresql://", "postgres://"):
        assert accepted in message
    assert "hunter2" not in message  # never echo a password


@pytest.mark.parametrize(
    ("portable", "psycopg"),
    [
        ("SELECT * FROM t WHERE a = ? AND b = ?", "SELECT * FROM t WHERE a = %s AND b = %s"),
        ("SELECT '50%', ? ", "SELECT '50%%', %s "),
        ("SELECT 'a?b', \"we?ird\", ?", "SELECT 'a?b', \"we?ird\", %s"),
        ("SELECT 'it''s ?', ?", "SELECT 'it''s ?', %s"),
        ("SELECT 1 -- why? 100%\n, ?", "SELECT 1 -- why? 100%%\n, %s"),
        ("SELECT /* ? % */ ?", "SELECT /* ? %% */ %s"),
        ("SELECT $$ ? % $$, $x$?$x$, ?", "SELECT $$ ? %% $$, $x$?$x$, %s"),
        ("SELECT a%b, ?", "SELECT a%%b, %s"),
    ],
)
def test_placeholder_translation(portable: str, psycopg: str) -> None:
    assert qmark_to_pyformat(portable) == psycopg


def test_sqlite_script_splitting() -> None:
    script = """
    -- a comment; with a semicolon
    CREATE TABLE a (x TEXT DEFAULT ';'); CREATE TABLE b (y TEXT);
    /* block; comment */
    CREATE TRIGGER t AFTER INSERT ON a BEGIN
        INSERT INTO b (y) VALUES (new.x || ';');
    END;
    -- trailing comment
    """
    statements = list(iter_statements(script))
    assert len(statements) == 3
    assert statements[0].endswith("CREATE TABLE a (x TEXT DEFAULT ';');")
    assert "CREATE TRIGGER" in statements[2] and statements[2].endswith("END;")
    with pytest.raises(ValueError, match="incomplete"):
        list(iter_statements("CREATE TABLE a (x TEXT); CREATE TABLE b (y"))
