"""Whole objects in and out of an artifact store, for tests (the product streams them)."""

from __future__ import annotations

from runplane.artifacts.store import ArtifactStore, ObjectInfo


async def put_bytes(store: ArtifactStore, key: str, data: bytes) -> ObjectInfo:
    async with store.writer(key) as w:
        await w.write(data)
        return await w.commit()


async def get_bytes(store: ArtifactStore, key: str) -> bytes:
    out = bytearray()
    async with store.reader(key) as r:
        async for chunk in r.chunks():
            out += chunk
    return bytes(out)
