"""A store whose disk fills up (issue 41 item 3), on a real small filesystem (a tmpfs): a
write that meets the full disk raises ``StoreFullError`` naming the data dir, nothing of it
is committed, reads go on, the writer survives and the next write succeeds once space was
freed. The dialects' classification (SQLITE_FULL, ENOSPC, PostgreSQL's 53100) is checked
on the drivers' own errors."""

from __future__ import annotations

import errno
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from runplane.persistence import StoreFullError, StoreUnavailableError, WriteBatchError
from runplane.persistence.errors import StoreFullWriteError, store_full
from runplane.persistence.postgres import PostgresStore, postgres_full, postgres_unreachable
from runplane.persistence.sqlite import SQLiteStore, sqlite_full, sqlite_unreachable
from runplane.runtime.errors import ActorCrashed


def mount_tmpfs(path: Path, size: str = "4m") -> None:
    """Mount a tmpfs of ``size`` on ``path``, or skip the test saying why (not root, no
    mount permission in this container)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip() or done.returncode}")


def unmount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def fill(path: Path) -> Path:
    """Fill the filesystem of directory ``path`` to the last byte with one file."""
    filler = path / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        size = 1 << 20
        while size:
            try:
                os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                size //= 2
    finally:
        os.close(fd)
    return filler


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "disk"
    mount_tmpfs(mnt)
    try:
        yield mnt
    finally:
        unmount(mnt)


def test_full_disk_errors_are_classified() -> None:
    full = _sqlite_error("database or disk is full", "SQLITE_FULL")
    assert sqlite_full(full) and not sqlite_unreachable(full)
    assert sqlite_full(OSError(errno.ENOSPC, "No space left on device"))
    assert sqlite_full(OSError(errno.EDQUOT, "Disk quota exceeded"))
    assert not sqlite_full(OSError(errno.EIO, "Input/output error"))
    assert not sqlite_full(_sqlite_error("no such table: t", "SQLITE_ERROR"))
    pg_full = psycopg.errors.DiskFull("could not extend file: No space left on device")
    assert postgres_full(pg_full) and not postgres_unreachable(pg_full)
    assert not postgres_full(psycopg.errors.UniqueViolation("duplicate key"))


def _sqlite_error(message: str, name: str) -> BaseException:
    import sqlite3

    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorname = name
    return exc


def test_an_actors_crash_on_a_full_disk_is_found() -> None:
    full = StoreFullError("the store's disk is full")
    assert store_full(ActorCrashed("jobs", full)) is full
    assert store_full(ExceptionGroup("nursery", [ValueError("x"), ActorCrashed("p", full)])) is full
    assert store_full(ValueError("x")) is None


async def test_a_full_data_dir_refuses_writes_and_recovers(small_disk: Path) -> None:
    db = small_disk / "runplane.db"
    async with SQLiteStore(db) as store:
        await store.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
        await store.execute("INSERT INTO t VALUES (1, 'kept')")
        filler = fill(small_disk)
        big = "x" * 200_000
        refused = 0
        for i in range(2, 12):  # WAL frames already allocated may take a write or two
            try:
                await store.execute("INSERT INTO t VALUES (?, ?)", (i, big))
            except StoreFullError as exc:
                refused += 1
                assert f"RUNPLANE_DATA_DIR={small_disk}" in str(exc)
                assert "is full" in str(exc)
                assert not isinstance(exc, StoreUnavailableError)
                break
        assert refused == 1
        # a batch that fails as a whole says the same (all its writes rolled back)
        with pytest.raises(StoreFullError) as caught:
            await store.transaction(
                lambda tx: [
                    tx.execute("INSERT INTO t VALUES (?, ?)", (100 + k, big)) for k in range(3)
                ]
            )
        if isinstance(caught.value, WriteBatchError):
            assert isinstance(caught.value, StoreFullWriteError)
        # reads go on
        row = await store.fetchone("SELECT body FROM t WHERE id = 1")
        assert row == {"body": "kept"}
        assert (await store.fetchone("SELECT COUNT(*) AS n FROM t WHERE id >= 100")) == {"n": 0}
        filler.unlink()
        # the same writer serves the next write, no restart
        await store.execute("INSERT INTO t VALUES (200, ?)", (big,))
        assert (await store.fetchone("SELECT length(body) AS n FROM t WHERE id = 200")) == {
            "n": len(big)
        }


@pytest.fixture
def pg_small_disk() -> Iterator[Path]:
    """A 2 MiB tmpfs the test's PostgreSQL (on this machine, as the ``postgres`` user)
    can hold a tablespace on."""
    try:
        owner = pwd.getpwnam("postgres")
    except KeyError:
        pytest.skip("no postgres OS user owns the test server")
    top = Path(tempfile.mkdtemp(prefix="runplane-pg-full-"))
    top.chmod(0o711)
    mnt = top / "ts"
    try:
        mount_tmpfs(mnt, "2m")
        os.chown(mnt, owner.pw_uid, owner.pw_gid)
        yield mnt
    finally:
        unmount(mnt)
        shutil.rmtree(top, ignore_errors=True)


@pytest.mark.postgres
async def test_a_full_postgres_tablespace_refuses_writes_and_recovers(
    pg_database: str, pg_small_disk: Path
) -> None:
    """PostgreSQL's own disk full (SQLSTATE 53100): a tablespace on a small tmpfs, filled:
    a write that must extend the table raises StoreFullError naming the PostgreSQL server's
    disk, reads go on, and the next write succeeds once space was freed."""
    if urlsplit(pg_database).hostname not in ("127.0.0.1", "localhost", None):
        pytest.skip("the PostgreSQL server is not on this machine (its tablespace dir is)")
    space = f"rp_full_{os.getpid()}"
    with psycopg.connect(pg_database, autocommit=True) as admin:
        admin.execute(f"CREATE TABLESPACE {space} LOCATION '{pg_small_disk}'".encode())
    try:
        await _fill_a_postgres_table(pg_database, space, pg_small_disk)
    finally:
        with psycopg.connect(pg_database, autocommit=True) as admin:
            admin.execute(b"DROP TABLE IF EXISTS big")
            admin.execute(f"DROP TABLESPACE IF EXISTS {space}".encode())


async def _fill_a_postgres_table(url: str, space: str, mnt: Path) -> None:
    big = "x" * 1500  # stored inline (under the TOAST threshold): each row extends the heap
    async with PostgresStore(url, migrations=[]) as store:
        await store.execute(
            f"CREATE TABLE big (id BIGINT PRIMARY KEY, body TEXT) TABLESPACE {space}"
        )
        await store.execute("ALTER TABLE big ALTER COLUMN body SET STORAGE PLAIN")
        filler = None
        refused = None
        for i in range(1, 5000):
            try:
                await store.execute("INSERT INTO big VALUES (?, ?)", (i, big))
            except StoreFullError as exc:
                refused = exc
                break
            if i == 10:
                filler = fill_as(mnt, pwd.getpwnam("postgres"))
        assert refused is not None, "the full tablespace never refused a write"
        assert "PostgreSQL server's disk is full" in str(refused) and "53100" in str(refused)
        assert not isinstance(refused, StoreUnavailableError)
        count = await store.fetchone("SELECT COUNT(*) AS n FROM big")
        assert count is not None and count["n"] >= 10
        assert filler is not None
        filler.unlink()
        await store.execute("INSERT INTO big VALUES (?, ?)", (100_000, big))
        assert await store.fetchone("SELECT id FROM big WHERE id = 100000") == {"id": 100_000}


def fill_as(path: Path, owner: pwd.struct_passwd) -> Path:
    filler = fill(path)
    os.chown(filler, owner.pw_uid, owner.pw_gid)
    return filler
