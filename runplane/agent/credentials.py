"""What a node agent keeps in its data dir across restarts: its credential and node id.

``<data_dir>/credential`` holds the node credential (``rpn_...``) the server handed out in
the ``welcome`` that answered the agent's enrollment (mode 0600, written atomically).
``<data_dir>/node_id`` holds the node id of the last welcome, for display only: the
server identifies the node by its credential.

Blocking file I/O on small files; fine to call from trio code.
"""

from __future__ import annotations

import os
from pathlib import Path

CREDENTIAL_FILE = "credential"
NODE_ID_FILE = "node_id"


def ensure_data_dir(data_dir: Path) -> None:
    """Create the data dir (mode 0700: it holds a secret) if it does not exist yet."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)


def _read(path: Path) -> str | None:
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return text or None


def _write_atomic(path: Path, text: str, mode: int) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # O_CREAT's mode is filtered by the umask; this is not
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def load_credential(data_dir: Path) -> str | None:
    """The stored node credential, or ``None`` before enrollment."""
    return _read(data_dir / CREDENTIAL_FILE)


def save_credential(data_dir: Path, credential: str) -> None:
    """Store the node credential with mode 0600 (replacing any older one)."""
    ensure_data_dir(data_dir)
    _write_atomic(data_dir / CREDENTIAL_FILE, credential + "\n", 0o600)


def load_node_id(data_dir: Path) -> str | None:
    return _read(data_dir / NODE_ID_FILE)


def save_node_id(data_dir: Path, node_id: str) -> None:
    ensure_data_dir(data_dir)
    if load_node_id(data_dir) != node_id:
        _write_atomic(data_dir / NODE_ID_FILE, node_id + "\n", 0o644)
