"""Test support for the self-update tests: a wheel of this checkout's ``runplane`` package
at any version (PEP 427, written directly: no build backend or network needed), and a
virtual environment of its own that imports the test's dependencies but not this
checkout's ``runplane``, so installing into it never touches the project's ``.venv``."""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sysconfig
import venv
import zipfile
from pathlib import Path

import runplane

PACKAGE = Path(runplane.__file__).parent
_VERSION_LINE = re.compile(r'^__version__ = "[^"]*"$', re.M)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_wheel(version: str, into: Path) -> Path:
    """``runplane-<version>-py3-none-any.whl`` in ``into``: every file of the package (no
    caches), ``__version__`` set to ``version``, and the ``runplane`` console script."""
    into.mkdir(parents=True, exist_ok=True)
    dist_info = f"runplane-{version}.dist-info"
    files: dict[str, bytes] = {}
    for path in sorted(PACKAGE.rglob("*")):
        if path.is_dir() or "__pycache__" in path.parts or path.suffix == ".pyc":
            continue
        data = path.read_bytes()
        if path == PACKAGE / "__init__.py":
            text, count = _VERSION_LINE.subn(f'__version__ = "{version}"', data.decode())
            assert count == 1, "runplane/__init__.py has no __version__ line"
            data = text.encode()
        files[f"runplane/{path.relative_to(PACKAGE).as_posix()}"] = data
    files[f"{dist_info}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: runplane\nVersion: {version}\n".encode()
    )
    files[f"{dist_info}/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: runplane-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    files[f"{dist_info}/entry_points.txt"] = b"[console_scripts]\nrunplane = runplane.cli:main\n"
    record = [_record_line(name, data) for name, data in files.items()]
    record.append(f"{dist_info}/RECORD,,")
    files[f"{dist_info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = into / f"runplane-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return wheel


def make_venv(where: Path) -> Path:
    """A venv (with pip) whose Python also sees this interpreter's installed dependencies
    through a directory of links to them, minus ``runplane`` itself (and pip and
    setuptools, which the venv has of its own). Returns its python."""
    venv.EnvBuilder(with_pip=True, symlinks=True).create(where)
    python = where / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = where / "deps"
    deps.mkdir()
    ours = Path(sysconfig.get_paths()["purelib"])
    skip = ("runplane", "__editable__", "pip", "setuptools", "_distutils_hack", "distutils-")
    for entry in ours.iterdir():
        if entry.name.startswith(skip) or entry.suffix == ".pth":
            continue
        (deps / entry.name).symlink_to(entry)
    Path(purelib, "zz_runplane_test_deps.pth").write_text(f"{deps}\n")
    return python


def pip_install(python: Path, wheel: Path) -> None:
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-index",
            "--no-deps",
            "--force-reinstall",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )


def imported_version(python: Path, cwd: Path) -> str:
    return subprocess.run(
        [str(python), "-c", "import runplane; print(runplane.__version__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=cwd,
    ).stdout.strip()
