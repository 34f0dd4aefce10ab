"""The filesystem artifact store: objects are files under ``<root>/objects/<key>``.

Writes go to a temp file in ``<root>/tmp`` (same filesystem), are fsynced, and are renamed
onto the key's path (``os.replace``, atomic): a reader has the old file or the new one open,
never half a file. A write that does not commit unlinks its temp file; temp files a crash
left behind are removed when the store opens. Every blocking call runs in a worker thread.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import secrets
import stat
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import trio

from runplane.artifacts.keys import check_key, check_prefix
from runplane.artifacts.store import (
    CHUNK_BYTES,
    ArtifactNotFound,
    ArtifactStore,
    KeyConflict,
    ObjectInfo,
    ObjectReader,
    ObjectWriter,
    StoreFull,
    TooLarge,
)

#: Temp files not touched for this long when the store opens are leftovers of a crash.
STALE_TEMP_SEC = 600.0
TEMP_SUFFIX = ".part"


#: OS errors of a full disk or a spent quota
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


@contextlib.contextmanager
def _full_is_typed(root: Path) -> Iterator[None]:
    """A full disk met inside becomes :class:`StoreFull` naming the store's root."""
    try:
        yield
    except OSError as exc:
        if exc.errno in FULL_ERRNOS:
            raise StoreFull(str(root)) from exc
        raise


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class _FsWriter(ObjectWriter):
    def __init__(self, store: FilesystemStore, key: str, max_bytes: int | None) -> None:
        self.store = store
        self.key = key
        self.max_bytes = max_bytes
        self.size = 0
        self._hash = hashlib.sha256()
        self.tmp = store.tmp_dir / f"{secrets.token_hex(12)}{TEMP_SUFFIX}"
        self._fd: int | None = os.open(
            self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600
        )
        self._done = False

    def _write_sync(self, data: bytes) -> None:
        assert self._fd is not None
        self._hash.update(data)
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    async def write(self, data: bytes) -> None:
        if self._done or self._fd is None:
            raise RuntimeError("write after commit or discard")
        if not data:
            return
        if self.max_bytes is not None and self.size + len(data) > self.max_bytes:
            raise TooLarge(self.max_bytes)
        self.size += len(data)
        with _full_is_typed(self.store.root):
            await trio.to_thread.run_sync(self._write_sync, data)

    def _commit_sync(self) -> ObjectInfo:
        fd, self._fd = self._fd, None
        assert fd is not None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        final = self.store.path_for(self.key)
        try:
            final.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.replace(self.tmp, final)
        except (FileExistsError, NotADirectoryError, IsADirectoryError):
            raise KeyConflict(
                f"artifact key {self.key!r} collides with an existing key "
                "(a key cannot be both an object and a prefix)"
            ) from None
        _fsync_dir(final.parent)
        return ObjectInfo(
            key=self.key,
            size=self.size,
            modified_ms=int(time.time() * 1000),
            sha256=self._hash.hexdigest(),
        )

    async def commit(self) -> ObjectInfo:
        if self._done or self._fd is None:
            raise RuntimeError("commit after commit or discard")
        try:
            with _full_is_typed(self.store.root):
                info = await trio.to_thread.run_sync(self._commit_sync)
        except BaseException:
            self.discard()
            raise
        self._done = True
        return info

    def discard(self) -> None:
        if self._done:
            return
        self._done = True
        fd, self._fd = self._fd, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(OSError):
            self.tmp.unlink()


class _FsReader(ObjectReader):
    def __init__(self, fd: int, info: ObjectInfo, chunk_bytes: int) -> None:
        self._fd: int | None = fd
        self.info = info
        self.chunk_bytes = chunk_bytes

    async def chunks(self) -> AsyncIterator[bytes]:
        remaining = self.info.size
        while remaining > 0:
            fd = self._fd
            if fd is None:
                return
            data = await trio.to_thread.run_sync(os.read, fd, min(self.chunk_bytes, remaining))
            if not data:
                return  # cannot shrink (the inode is ours), but never loop on EOF
            remaining -= len(data)
            yield data

    async def aclose(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


class FilesystemStore(ArtifactStore):
    kind = "filesystem"

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        self.tmp_dir = self.root / "tmp"

    # -- paths

    def path_for(self, key: str) -> Path:
        """Where ``key`` lives (the key must be valid: no escaping segments reach here)."""
        path = self.objects.joinpath(*check_key(key).split("/"))
        if self.objects not in path.parents:
            raise ValueError(f"key {key!r} escapes the store")  # unreachable for valid keys
        return path

    def _dir_for(self, prefix: str) -> Path:
        return self.objects.joinpath(*check_prefix(prefix).split("/"))

    # -- lifecycle

    def _open_sync(self) -> None:
        self.objects.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.tmp_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        cutoff = time.time() - STALE_TEMP_SEC
        for entry in os.scandir(self.tmp_dir):
            with contextlib.suppress(OSError):
                if entry.name.endswith(TEMP_SUFFIX) and entry.stat().st_mtime < cutoff:
                    os.unlink(entry.path)

    async def open(self) -> None:
        await trio.to_thread.run_sync(self._open_sync)

    # -- writing

    async def begin(self, key: str, *, max_bytes: int | None = None) -> ObjectWriter:
        check_key(key)
        with _full_is_typed(self.root):
            return await trio.to_thread.run_sync(_FsWriter, self, key, max_bytes)

    # -- reading

    def _open_reader_sync(self, key: str, chunk_bytes: int) -> _FsReader:
        path = self.path_for(key)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise ArtifactNotFound(key) from None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # a symlink where an object should be
                raise ArtifactNotFound(key) from None
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise ArtifactNotFound(key)
        info = ObjectInfo(key=key, size=st.st_size, modified_ms=int(st.st_mtime * 1000))
        return _FsReader(fd, info, chunk_bytes)

    async def open_reader(self, key: str, *, chunk_bytes: int = CHUNK_BYTES) -> ObjectReader:
        return await trio.to_thread.run_sync(self._open_reader_sync, key, chunk_bytes)

    def _stat_sync(self, key: str) -> ObjectInfo | None:
        try:
            st = self.path_for(key).lstat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return ObjectInfo(key=key, size=st.st_size, modified_ms=int(st.st_mtime * 1000))

    async def stat(self, key: str) -> ObjectInfo | None:
        return await trio.to_thread.run_sync(self._stat_sync, key)

    def _list_sync(self, prefix: str, limit: int | None) -> list[ObjectInfo]:
        base = self._dir_for(prefix)
        clean = check_prefix(prefix)
        found: list[ObjectInfo] = []
        if not base.is_dir() or base.is_symlink():
            return found
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames.sort()
            rel_dir = os.path.relpath(dirpath, base)
            for name in sorted(filenames):
                full = os.path.join(dirpath, name)
                try:
                    st = os.lstat(full)
                except OSError:
                    continue
                if not stat.S_ISREG(st.st_mode):
                    continue
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                found.append(
                    ObjectInfo(
                        key=f"{clean}/{rel}", size=st.st_size, modified_ms=int(st.st_mtime * 1000)
                    )
                )
                if limit is not None and len(found) >= limit:
                    return sorted(found, key=lambda i: i.key)
        return sorted(found, key=lambda i: i.key)

    async def list(self, prefix: str, *, limit: int | None = None) -> list[ObjectInfo]:
        return await trio.to_thread.run_sync(self._list_sync, prefix, limit)

    async def is_prefix(self, prefix: str) -> bool:
        return bool(await self.list(prefix, limit=1))

    def _delete_sync(self, key: str) -> bool:
        path = self.path_for(key)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return False
        parent = path.parent
        while parent != self.objects and self.objects in parent.parents:
            try:
                parent.rmdir()  # only when empty
            except OSError:
                break
            parent = parent.parent
        return True

    async def delete(self, key: str) -> bool:
        return await trio.to_thread.run_sync(self._delete_sync, key)
