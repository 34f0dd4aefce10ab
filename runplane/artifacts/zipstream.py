"""A zip of stored objects, produced as a stream of chunks (never the whole zip in memory).

``zipfile`` writes into a sink that only counts and buffers; each object is read from the
store chunk by chunk, CRC'd in a worker thread, and what the sink holds is yielded as soon
as it passes :data:`FLUSH_BYTES`. The stream is not seekable, so entries carry data
descriptors; entries are stored (not compressed): the server spends no CPU on deflate and
artifacts such as checkpoints do not compress anyway. Entries over ~2 GiB get ZIP64 headers.
"""

from __future__ import annotations

import time
import zipfile
from collections.abc import AsyncIterator, Sequence

import trio

from runplane.artifacts.store import ArtifactNotFound, ArtifactStore, ObjectInfo

FLUSH_BYTES = 256 * 1024
_ZIP64_AT = 2**31 - 2**20  # be safe: ZIP64 headers from just under 2 GiB
_MIN_DATE = (1980, 1, 1, 0, 0, 0)


class _Sink:
    """A write-only, tell-able, non-seekable file for ``zipfile``."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.position = 0

    def write(self, data: bytes) -> int:
        self.buffer += data
        self.position += len(data)
        return len(data)

    def tell(self) -> int:
        return self.position

    def flush(self) -> None:
        pass

    def close(self) -> None:
        # part of the file protocol zipfile's stub asks for; zipfile does not close a file
        # object it was handed, and there is nothing to release
        pass

    def take(self) -> bytes:
        data = bytes(self.buffer)
        self.buffer.clear()
        return data


def _date_time(ms: int) -> tuple[int, int, int, int, int, int]:
    stamp = time.gmtime(ms / 1000)[:6]
    return max(stamp, _MIN_DATE)


async def zip_objects(
    store: ArtifactStore, objects: Sequence[ObjectInfo], strip: str
) -> AsyncIterator[bytes]:
    """Yield a zip of ``objects``, each named by its key without the ``strip`` prefix.

    An object deleted between listing and reading is skipped (the zip stays valid)."""
    sink = _Sink()
    archive = zipfile.ZipFile(sink, mode="w", compression=zipfile.ZIP_STORED)
    cut = len(strip) + 1 if strip else 0
    for info in objects:
        name = info.key[cut:] if strip and info.key.startswith(strip + "/") else info.key
        try:
            reader = await store.open_reader(info.key)
        except ArtifactNotFound:
            continue
        try:
            entry = zipfile.ZipInfo(name, date_time=_date_time(reader.info.modified_ms))
            entry.compress_type = zipfile.ZIP_STORED
            entry.external_attr = 0o644 << 16
            out = archive.open(entry, mode="w", force_zip64=reader.info.size >= _ZIP64_AT)
            try:
                async for chunk in reader.chunks():
                    await trio.to_thread.run_sync(out.write, chunk)
                    if len(sink.buffer) >= FLUSH_BYTES:
                        yield sink.take()
            finally:
                out.close()
        finally:
            await reader.aclose()
        if sink.buffer:
            yield sink.take()
    archive.close()
    if sink.buffer:
        yield sink.take()
