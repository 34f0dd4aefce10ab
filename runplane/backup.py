"""``runplane backup DEST`` and ``runplane restore SRC`` (docs/operations.md "Backups").

A backup is a directory (0700, files 0600): the database (SQLite: ``runplane.db``, taken
with SQLite's online backup API; PostgreSQL: ``database.pgdump``, ``pg_dump -Fc``), then the
artifact tree (``artifacts/``, copied AFTER the database snapshot, so every artifact a row
of the snapshot names is there; later files are harmless extras), then the data dir's
``secret.key`` (sealed secrets open only with it), and last ``manifest.json`` (versions, the
store kind, every file with its sha256): a backup without a manifest is incomplete.

A restore checks the manifest and every sha256, refuses a backup of a newer schema than this
runplane knows, holds the data dir's ``server.lock`` (no server may run on the target), and
refuses a target that is not empty unless forced."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from runplane import __version__
from runplane.datadir import lock_data_dir
from runplane.persistence import DB_FILENAME
from runplane.persistence.migrate import load_migrations
from runplane.settings import SECRET_KEY_FILE, Settings

MANIFEST = "manifest.json"
FORMAT = 1
PG_DUMP_FILE = "database.pgdump"
ARTIFACTS = "artifacts"
#: a progress line on stderr every this many bytes of artifacts
PROGRESS_BYTES = 256 * 1024 * 1024


class BackupError(Exception):
    """A backup or restore cannot go on; the message is one line for the operator."""


def _say(text: str) -> None:
    print(f"runplane: {text}", file=sys.stderr, flush=True)


def store_kind(settings: Settings) -> str:
    url = (settings.database_url or "").strip().lower()
    if not url:
        return "sqlite"
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql"
    raise BackupError("RUNPLANE_DATABASE_URL=memory holds nothing to back up")


def known_schema(kind: str) -> int:
    dialect = "sqlite" if kind == "sqlite" else "postgres"
    return load_migrations(dialect=dialect)[-1].version


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _new_file(path: Path) -> int:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)


def _copy_file(src: Path, dst: Path) -> None:
    fd = _new_file(dst)
    with src.open("rb") as fin, os.fdopen(fd, "wb") as fout:
        shutil.copyfileobj(fin, fout, 1 << 20)
        fout.flush()
        os.fsync(fout.fileno())


def _copy_tree(src: Path, dst: Path, label: str) -> None:
    """Copy the files of ``src`` (not its ``tmp/``: writes in progress) into ``dst``."""
    if not src.is_dir():
        return
    copied = files = 0
    next_report = PROGRESS_BYTES
    for root, dirs, names in os.walk(src):
        here = Path(root)
        if here == src:
            dirs[:] = [d for d in dirs if d != "tmp"]
        for name in sorted(names):
            path = here / name
            target = dst / path.relative_to(src)
            try:
                _copy_file(path, target)
            except FileNotFoundError:
                target.unlink(missing_ok=True)
                continue  # deleted meanwhile (retention): no row of the snapshot names it
            copied += target.stat().st_size
            files += 1
            if copied >= next_report:
                _say(f"{label}: {files} files, {copied // (1 << 20)} MiB copied")
                next_report += PROGRESS_BYTES
    _say(f"{label}: {files} files, {copied // (1 << 20)} MiB copied")


# -- backup -------------------------------------------------------------------------------


def _sqlite_snapshot(db: Path, dst: Path) -> int:
    """The store file as of one instant (the online backup API, in one step); its schema
    version."""
    if not db.exists():
        raise BackupError(f"no database at {db}: is RUNPLANE_DATA_DIR right?")
    os.close(_new_file(dst))  # 0600 before anything is in it
    src = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    out = sqlite3.connect(dst)
    try:
        src.backup(out, pages=-1)
        row = out.execute("SELECT max(version) FROM schema_migrations").fetchone()
    finally:
        out.close()
        src.close()
    os.chmod(dst, 0o600)
    return int(row[0])


def _pg_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise BackupError(f"{name} is not on PATH: install the PostgreSQL client tools")
    return path


def _run_pg(args: list[str], what: str) -> None:
    done = subprocess.run(args, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        raise BackupError(f"{what} failed: {lines[0] if lines else f'exit {done.returncode}'}")


def _pg_schema(url: str) -> int | None:
    """The database's schema version; None when it has no runplane tables."""
    import psycopg

    try:
        with psycopg.connect(url, connect_timeout=10) as conn:
            exists = conn.execute("SELECT to_regclass('schema_migrations')").fetchone()
            if exists is None or exists[0] is None:
                return None
            row = conn.execute("SELECT max(version) FROM schema_migrations").fetchone()
    except psycopg.Error as exc:
        raise BackupError(f"cannot reach the database: {str(exc).splitlines()[0]}") from None
    return int(row[0]) if row and row[0] is not None else 0


def _pg_snapshot(url: str, dst: Path) -> int:
    pg_dump = _pg_tool("pg_dump")
    schema = _pg_schema(url)
    if schema is None:
        raise BackupError("the database has no runplane tables: nothing to back up")
    os.close(_new_file(dst))  # 0600 before anything is in it
    args = [pg_dump, "--format=custom", "--no-owner", f"--file={dst}", f"--dbname={url}"]
    _run_pg(args, "pg_dump")
    os.chmod(dst, 0o600)
    return schema


def _empty_dest(dest: Path) -> None:
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"{dest} exists and is not an empty directory: give a new one")
    dest.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(dest, 0o700)


def backup(settings: Settings, dest: Path) -> dict[str, Any]:
    """Take a backup of what ``settings`` name into ``dest`` (new or empty); the manifest."""
    kind = store_kind(settings)
    if kind == "postgresql":
        _pg_tool("pg_dump")  # before anything is written
    _empty_dest(dest)
    _say(f"backing up the {kind} store into {dest}")
    if kind == "sqlite":
        schema = _sqlite_snapshot(settings.data_dir / DB_FILENAME, dest / DB_FILENAME)
    else:
        schema = _pg_snapshot(str(settings.database_url), dest / PG_DUMP_FILE)
    _say(f"database snapshot taken (schema {schema})")
    _copy_tree(settings.data_dir / ARTIFACTS, dest / ARTIFACTS, "artifacts")
    key = settings.data_dir / SECRET_KEY_FILE
    if key.exists():
        _copy_file(key, dest / SECRET_KEY_FILE)
    elif settings.secret_key is not None:
        _say("the secret key comes from RUNPLANE_SECRET_KEY: it is not in the backup, keep it")
    files = _listing(dest)
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "runplane_version": __version__,
        "schema_version": schema,
        "store": kind,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "secret_key": "file" if key.exists() else "RUNPLANE_SECRET_KEY",
        "files": files,
    }
    tmp = dest / f".{MANIFEST}.tmp"
    with os.fdopen(_new_file(tmp), "w") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, dest / MANIFEST)  # last: a backup without it is incomplete
    _say(f"backup complete: {len(files)} files in {dest}")
    return manifest


def _listing(root: Path) -> dict[str, dict[str, Any]]:
    files: dict[str, dict[str, Any]] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        name = path.relative_to(root).as_posix()
        if name != MANIFEST and not name.startswith("."):
            files[name] = {"sha256": _sha256(path), "bytes": path.stat().st_size}
    return files


# -- restore ------------------------------------------------------------------------------


def read_manifest(src: Path) -> dict[str, Any]:
    """The backup's manifest, every file checked against its sha256."""
    path = src / MANIFEST
    if not path.is_file():
        raise BackupError(f"{src} has no {MANIFEST}: not a backup, or an incomplete one")
    try:
        manifest: dict[str, Any] = json.loads(path.read_text())
        files: dict[str, dict[str, Any]] = manifest["files"]
        kind, schema = manifest["store"], int(manifest["schema_version"])
    except (ValueError, KeyError, TypeError):
        raise BackupError(f"{path} is not a runplane backup manifest") from None
    if kind not in {"sqlite", "postgresql"}:
        raise BackupError(f"{path}: unknown store kind {kind!r}")
    if schema > known_schema(kind):
        raise BackupError(
            f"the backup's schema is version {schema}, newer than this runplane "
            f"{__version__} knows ({known_schema(kind)}): restore with a newer runplane"
        )
    for name, entry in files.items():
        file = src / name
        if not file.is_file():
            raise BackupError(f"{file} is missing from the backup")
        if _sha256(file) != entry["sha256"]:
            raise BackupError(f"{file} does not match its sha256 in {MANIFEST}: corrupt backup")
    return manifest


def _sqlite_target_used(data_dir: Path) -> bool:
    names = (DB_FILENAME, SECRET_KEY_FILE)
    artifacts = data_dir / ARTIFACTS
    has_artifacts = artifacts.is_dir() and any(
        p.is_file() for p in artifacts.rglob("*") if "tmp" not in p.relative_to(artifacts).parts
    )
    return has_artifacts or any((data_dir / name).exists() for name in names)


def restore(settings: Settings, src: Path, *, force: bool = False) -> dict[str, Any]:
    """Restore the backup ``src`` into what ``settings`` name; the manifest."""
    manifest = read_manifest(src)
    kind = store_kind(settings)
    if manifest["store"] != kind:
        raise BackupError(
            f"the backup is of a {manifest['store']} store but the target is {kind} "
            "(RUNPLANE_DATABASE_URL)"
        )
    lock_data_dir(settings.data_dir)  # DataDirInUse when a server runs on it; ours till exit
    data_dir = settings.data_dir
    url = str(settings.database_url)
    used = _sqlite_target_used(data_dir) or (kind == "postgresql" and _pg_schema(url) is not None)
    if used and not force:
        raise BackupError(f"the target ({data_dir}, its database) is not empty: pass --force")
    if kind == "sqlite":
        _restore_sqlite(src / DB_FILENAME, data_dir / DB_FILENAME)
    else:
        _restore_pg(src / PG_DUMP_FILE, url, clean=used)
    _say("database restored")
    shutil.rmtree(data_dir / ARTIFACTS, ignore_errors=True)
    _copy_tree(src / ARTIFACTS, data_dir / ARTIFACTS, "artifacts")
    if (src / SECRET_KEY_FILE).is_file():
        _copy_file(src / SECRET_KEY_FILE, data_dir / SECRET_KEY_FILE)
        if settings.secret_key is not None:
            _say(
                "RUNPLANE_SECRET_KEY is set: it wins over the restored secret.key; unset it "
                "unless it is the key the backed-up server used"
            )
    elif manifest.get("secret_key") == "RUNPLANE_SECRET_KEY":
        _say("the backup holds no secret key: set RUNPLANE_SECRET_KEY as the backed-up server had")
    _say(f"restore complete into {data_dir}")
    return manifest


def _restore_sqlite(src: Path, db: Path) -> None:
    for suffix in ("-wal", "-shm", "-journal"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    tmp = db.with_name(f".{db.name}.restore")
    _copy_file(src, tmp)
    os.replace(tmp, db)


def _restore_pg(dump: Path, url: str, *, clean: bool) -> None:
    pg_restore = _pg_tool("pg_restore")
    args = [pg_restore, "--no-owner", "--exit-on-error", f"--dbname={url}"]
    if clean:
        args += ["--clean", "--if-exists"]
    _run_pg([*args, str(dump)], "pg_restore")
