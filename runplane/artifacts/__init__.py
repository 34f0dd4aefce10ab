"""Artifact storage: the store interface, its filesystem backend, key rules, zip streaming,
and the small HTTP transfer client node agents use to fetch inputs and upload outputs.

See ``docs/artifacts.md``.
"""

from pathlib import Path

from runplane.artifacts.fs import FilesystemStore
from runplane.artifacts.keys import BadKey, check_key, check_prefix
from runplane.artifacts.store import (
    ArtifactNotFound,
    ArtifactStore,
    KeyConflict,
    ObjectInfo,
    ObjectReader,
    ObjectWriter,
    StoreFull,
    TooLarge,
)

__all__ = [
    "ArtifactNotFound",
    "ArtifactStore",
    "BadKey",
    "FilesystemStore",
    "KeyConflict",
    "ObjectInfo",
    "ObjectReader",
    "ObjectWriter",
    "StoreFull",
    "TooLarge",
    "check_key",
    "check_prefix",
    "open_artifact_store",
]


def open_artifact_store(data_dir: Path) -> ArtifactStore:
    """The store for a deployment: the filesystem under ``<data dir>/artifacts`` (the one
    backend so far; a URL setting would pick an S3-compatible one here). Call ``open()``."""
    return FilesystemStore(Path(data_dir) / "artifacts")
