"""Shared fixtures: the store backends.

``store_url`` / ``store`` are parametrized over the backends so the same tests
run on SQLite, a real PostgreSQL and the memory store:

* ``sqlite``: ``RUNPLANE_DATABASE_URL`` unset, a fresh data dir (tmp_path);
* ``postgres``: a fresh database per test (CREATE DATABASE with a unique name,
  dropped afterwards) on the server named by ``RUNPLANE_TEST_PG_URL``. Unset, the
  test FAILS (the PostgreSQL run is not optional), unless ``RUNPLANE_TEST_PG=skip``;
* ``memory``: ``RUNPLANE_DATABASE_URL=memory``.

``durable_store_url`` is the same without the memory backend (restart,
durability and migration tests).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from hypothesis import settings as hypothesis_settings

from runplane.persistence import Store, open_store
from tests.oci import busybox_image, oci_auth_registry, oci_registry  # noqa: F401 (fixtures)

# CI explores the same examples every run (a red build must be reproducible, not luck);
# local runs keep hypothesis' random exploration, which is how new bugs are found.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    hypothesis_settings.load_profile("ci")

# Every JSON answer of a route is checked against its declared response model, as if the
# model forbade fields it does not name (runplane/http/strict.py): a test fails on drift.
os.environ.setdefault("RUNPLANE_STRICT_VIEWS", "1")

PG_URL_ENV = "RUNPLANE_TEST_PG_URL"
PG_SKIP_ENV = "RUNPLANE_TEST_PG"

ALL_BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    pytest.param("memory", id="memory"),
]
DURABLE_BACKENDS = ALL_BACKENDS[:2]


def pg_admin_url() -> str:
    """The test server's URL, or fail/skip the test as the environment says."""
    url = os.environ.get(PG_URL_ENV, "").strip()
    if url:
        return url
    if os.environ.get(PG_SKIP_ENV, "").strip().lower() == "skip":
        pytest.skip(f"PostgreSQL tests skipped: {PG_SKIP_ENV}=skip")
    pytest.fail(
        f"{PG_URL_ENV} is not set: run the suite with scripts/test, which starts PostgreSQL, "
        f"or start one yourself (`scripts/pgtest start .pgtest`) and export {PG_URL_ENV}=<the "
        f"printed URL>. Set {PG_SKIP_ENV}=skip to skip the PostgreSQL tests explicitly.",
        pytrace=False,
    )


def with_dbname(url: str, dbname: str) -> str:
    """``url`` pointing at database ``dbname`` (query string, e.g. host=/sock, kept)."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + dbname, parts.query, parts.fragment))


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test; yields its URL."""
    import psycopg

    admin = pg_admin_url()
    name = f"rp_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"'.encode())
    try:
        yield with_dbname(admin, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'.encode())


def _url_for(backend: str, request: pytest.FixtureRequest) -> str | None:
    if backend == "sqlite":
        return None
    if backend == "memory":
        return "memory"
    return str(request.getfixturevalue("pg_database"))


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """RUNPLANE_DATA_DIR for the test (not created: open_store must create it)."""
    return tmp_path / "data"


@pytest.fixture(params=ALL_BACKENDS)
def store_url(request: pytest.FixtureRequest) -> str | None:
    """RUNPLANE_DATABASE_URL for each backend (None = embedded SQLite in ``data_dir``)."""
    return _url_for(request.param, request)


@pytest.fixture(params=DURABLE_BACKENDS)
def durable_store_url(request: pytest.FixtureRequest) -> str | None:
    """Like ``store_url``, for the backends that keep data across a restart."""
    return _url_for(request.param, request)


@pytest.fixture
async def store(store_url: str | None, data_dir: Path) -> AsyncIterator[Store]:
    """An open store of each backend, closed after the test."""
    s = open_store(store_url, data_dir)
    await s.open()
    try:
        yield s
    finally:
        await s.close()
