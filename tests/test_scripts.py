"""The developer scripts, as a new user meets them.

- ``scripts/pgtest start`` does not depend on a free fixed port: with 54329 held (the
  benchmark's PostgreSQL used to sit there and ``scripts/test`` then failed with "could not
  bind IPv4 address"), it starts on a free port, records it, and a second ``start`` and
  ``url`` print the same URL; ``RUNPLANE_PGTEST_PORT`` pins the port.
- ``scripts/bootstrap`` succeeds (a no-op when ``.venv`` is up to date).
- ``pyproject.toml``'s license is an SPDX string, which setuptools >= 77 reads without the
  deprecation warnings a table gives.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import socket
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

REPO = Path(__file__).resolve().parent.parent
PGTEST = REPO / "scripts" / "pgtest"
#: The port scripts/pgtest used to insist on (and the benchmark's server still holds).
OLD_DEFAULT_PORT = 54329
TIMEOUT = 180

needs_postgres_binaries = pytest.mark.skipif(
    shutil.which("initdb") is None and not glob.glob("/usr/lib/postgresql/*/bin/initdb"),
    reason="PostgreSQL server binaries not installed (scripts/test and CI install them)",
)


def pgtest(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if k != "RUNPLANE_PGTEST_PORT"}
    environ.update(env)
    return subprocess.run(
        [str(PGTEST), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=environ,
        check=False,
    )


def port_of(url: str) -> int:
    port = urlsplit(url).port
    assert port is not None, url
    return port


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def pg_dir() -> Iterator[Path]:
    """A server directory for scripts/pgtest, stopped and removed afterwards. Not under
    pytest's tmp_path: as root the server runs as the postgres user, who cannot traverse
    /tmp/pytest-of-root (mode 0700)."""
    parent = Path(tempfile.mkdtemp(prefix="rp-test-pgtest-"))
    parent.chmod(0o755)
    try:
        yield parent / "pg"
    finally:
        pgtest("stop", parent / "pg")
        shutil.rmtree(parent, ignore_errors=True)


@pytest.fixture
def old_port_held() -> Iterator[None]:
    """Something listens on 127.0.0.1:54329 for the test: our socket, or whatever already
    holds it (the benchmark's PostgreSQL)."""
    sock = socket.socket()
    try:
        sock.bind(("127.0.0.1", OLD_DEFAULT_PORT))
        sock.listen()
    except OSError:
        sock.close()  # already held by someone else: just as good
        yield
        return
    try:
        yield
    finally:
        sock.close()


@needs_postgres_binaries
def test_pgtest_starts_on_a_free_port_while_54329_is_held(
    pg_dir: Path, old_port_held: None
) -> None:
    import psycopg

    first = pgtest("start", pg_dir)
    assert first.returncode == 0, first.stderr
    url = first.stdout.strip().splitlines()[-1]
    assert url.startswith("postgresql://postgres@127.0.0.1:"), first.stdout
    port = port_of(url)
    assert port != OLD_DEFAULT_PORT
    assert (pg_dir / "port").read_text().strip() == str(port)
    with psycopg.connect(url, connect_timeout=10) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)

    again = pgtest("start", pg_dir)  # idempotent: the running server's URL
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == url
    assert pgtest("url", pg_dir).stdout.strip() == url
    status = pgtest("status", pg_dir)
    assert (status.returncode, status.stdout.strip()) == (0, url)

    assert pgtest("stop", pg_dir).returncode == 0
    assert pgtest("status", pg_dir).returncode == 3
    restarted = pgtest("start", pg_dir)  # the recorded port, still free, is taken again
    assert restarted.returncode == 0, restarted.stderr
    assert restarted.stdout.strip() == url


@needs_postgres_binaries
def test_pgtest_port_can_be_pinned_and_a_taken_one_is_refused_clearly(
    pg_dir: Path, old_port_held: None
) -> None:
    taken = pgtest("start", pg_dir, RUNPLANE_PGTEST_PORT=str(OLD_DEFAULT_PORT))
    assert taken.returncode != 0
    assert f"port {OLD_DEFAULT_PORT} (RUNPLANE_PGTEST_PORT) is already in use" in taken.stderr
    assert not (pg_dir / "port").exists()  # nothing recorded for a server that never ran

    pinned = free_port()
    started = pgtest("start", pg_dir, RUNPLANE_PGTEST_PORT=str(pinned))
    assert started.returncode == 0, started.stderr
    assert port_of(started.stdout.strip().splitlines()[-1]) == pinned
    assert port_of(pgtest("url", pg_dir).stdout.strip()) == pinned


def test_bootstrap_succeeds_and_keeps_stdout_clean() -> None:
    done = subprocess.run(
        [str(REPO / "scripts" / "bootstrap")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # progress lines go to stderr


def test_pyproject_license_is_an_spdx_string_setuptools_reads_without_warnings() -> None:
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert pyproject["project"]["license"] == "Apache-2.0"
    requires = pyproject["build-system"]["requires"]
    [setuptools] = [r for r in requires if re.match(r"setuptools\b", r)]
    match = re.fullmatch(r"setuptools\s*>=\s*(\d+)(?:\.\d+)*", setuptools)
    assert match, setuptools
    assert int(match.group(1)) >= 77  # the first setuptools that takes an SPDX string
