"""The artifact store interface: streaming writes that land atomically, streaming reads.

Callers (the artifact and upload routes, the artifacts-zip stream) see only
:class:`ArtifactStore`; the filesystem backend (:mod:`runplane.artifacts.fs`) is the default
and an S3-compatible backend fits the same shape: ``writer`` = a multipart upload (commit =
complete, abort = abort), ``reader`` = a streamed GET, ``list`` = ListObjectsV2 under the
prefix. Keys are checked with :mod:`runplane.artifacts.keys` before they reach a backend.

Contract every backend keeps:

- A write is invisible until :meth:`ObjectWriter.commit`; a reader sees either the old
  object or the new one, whole, never a mix or a prefix of it. A writer that is aborted,
  fails, or is left by a cancelled task leaves nothing behind.
- Nothing holds a whole object in memory: writes and reads move one chunk at a time.
- ``max_bytes`` is enforced while writing (:class:`TooLarge` as soon as it is crossed).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterable, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

#: Default chunk for reads (and the unit writes are batched to by callers).
CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    modified_ms: int
    sha256: str | None = None  # known right after a write; backends need not keep it


class ArtifactNotFound(LookupError):
    """No object under that key."""


class KeyConflict(ValueError):
    """The key is used as an object and as a prefix at once (``a/b`` and ``a/b/c``)."""


class TooLarge(ValueError):
    """The object is bigger than the ``max_bytes`` the writer was opened with."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(f"object is larger than {max_bytes} bytes")
        self.max_bytes = max_bytes


class StoreFull(RuntimeError):
    """The artifact store's disk is full (ENOSPC) or its quota spent (EDQUOT): the write
    was discarded, nothing of it is left (docs/operations.md "Full disks")."""

    def __init__(self, where: str) -> None:
        super().__init__(
            f"the artifact store's disk ({where}) is full, so the artifact was not stored: "
            "free space, then retry"
        )


class ObjectWriter(ABC):
    """One object being written. Use through :meth:`ArtifactStore.writer`."""

    key: str
    size: int

    @abstractmethod
    async def write(self, data: bytes) -> None: ...

    @abstractmethod
    async def commit(self) -> ObjectInfo:
        """Make the object visible under its key (atomically replacing an older one)."""

    @abstractmethod
    def discard(self) -> None:
        """Drop whatever was written (sync, so it also runs in a cancelled task's cleanup).
        A no-op after commit."""


class ObjectReader(ABC):
    """One object opened for reading: ``info`` and its bytes as an async iterator of chunks.
    It reads the version that was current when it was opened, to the end."""

    info: ObjectInfo

    @abstractmethod
    def chunks(self) -> AsyncIterator[bytes]: ...

    @abstractmethod
    async def aclose(self) -> None: ...


class ArtifactStore(ABC):
    kind: str = "abstract"

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Prepare the backend (create directories, clean what a crash left)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release what :meth:`open` took."""

    @abstractmethod
    async def begin(self, key: str, *, max_bytes: int | None = None) -> ObjectWriter:
        """Start writing ``key`` (prefer :meth:`writer`, which always cleans up)."""

    @abstractmethod
    async def open_reader(self, key: str, *, chunk_bytes: int = CHUNK_BYTES) -> ObjectReader:
        """Open ``key`` for reading; :class:`ArtifactNotFound` when there is no such object."""

    @abstractmethod
    async def stat(self, key: str) -> ObjectInfo | None: ...

    @abstractmethod
    async def list(self, prefix: str, *, limit: int | None = None) -> list[ObjectInfo]:
        """Objects under ``prefix/`` (not ``prefix`` itself), sorted by key."""

    @abstractmethod
    async def is_prefix(self, prefix: str) -> bool:
        """True when at least one object lives under ``prefix/``."""

    @abstractmethod
    async def delete(self, key: str) -> bool: ...

    # -- conveniences built on the primitives

    @asynccontextmanager
    async def writer(
        self, key: str, *, max_bytes: int | None = None
    ) -> AsyncIterator[ObjectWriter]:
        """``async with store.writer(key) as w: await w.write(...); await w.commit()``.
        Leaving the block without commit (an error, a cancel) discards the write."""
        w = await self.begin(key, max_bytes=max_bytes)
        try:
            yield w
        finally:
            w.discard()

    async def put(
        self, key: str, chunks: AsyncIterable[bytes], *, max_bytes: int | None = None
    ) -> ObjectInfo:
        async with self.writer(key, max_bytes=max_bytes) as w:
            async for chunk in chunks:
                await w.write(chunk)
            return await w.commit()

    @asynccontextmanager
    async def reader(
        self, key: str, *, chunk_bytes: int = CHUNK_BYTES
    ) -> AsyncIterator[ObjectReader]:
        r = await self.open_reader(key, chunk_bytes=chunk_bytes)
        try:
            yield r
        finally:
            await r.aclose()
