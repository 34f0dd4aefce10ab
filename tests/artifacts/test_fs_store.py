"""The filesystem artifact store: atomic writes, no leftovers, streaming reads, listing, zip."""

from __future__ import annotations

import hashlib
import io
import os
import time
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from runplane.artifacts import (
    ArtifactNotFound,
    BadKey,
    FilesystemStore,
    KeyConflict,
    TooLarge,
)
from runplane.artifacts.fs import STALE_TEMP_SEC
from runplane.artifacts.zipstream import zip_objects
from tests.artifacts.bytes import get_bytes, put_bytes


@pytest.fixture
async def store(tmp_path: Path) -> FilesystemStore:
    s = FilesystemStore(tmp_path / "artifacts")
    await s.open()
    return s


def _leftovers(store: FilesystemStore) -> list[str]:
    return os.listdir(store.tmp_dir)


async def test_put_get_stat_list_delete(store: FilesystemStore) -> None:
    info = await put_bytes(store, "job_1/out/a.txt", b"hello")
    assert info.size == 5 and info.sha256 == hashlib.sha256(b"hello").hexdigest()
    assert await get_bytes(store, "job_1/out/a.txt") == b"hello"
    await put_bytes(store, "job_1/b.bin", b"\0" * 10)
    stat = await store.stat("job_1/b.bin")
    assert stat is not None and stat.size == 10
    assert await store.stat("job_1") is None  # a prefix, not an object
    assert [o.key for o in await store.list("job_1")] == ["job_1/b.bin", "job_1/out/a.txt"]
    assert [o.key for o in await store.list("job_1/out/")] == ["job_1/out/a.txt"]
    assert await store.list("job_2") == []
    assert await store.is_prefix("job_1") and not await store.is_prefix("job_2")
    assert await store.delete("job_1/out/a.txt")
    assert not await store.delete("job_1/out/a.txt")
    assert not (store.objects / "job_1" / "out").exists()  # empty dirs pruned
    with pytest.raises(ArtifactNotFound):
        await store.open_reader("job_1/out/a.txt")
    assert _leftovers(store) == []


async def test_bad_keys_never_reach_the_disk(store: FilesystemStore, tmp_path: Path) -> None:
    for key in ("../escape", "/abs", "a/../../b", "a\\b"):
        with pytest.raises(BadKey):
            await put_bytes(store, key, b"x")
        with pytest.raises(BadKey):
            await store.open_reader(key)
    assert not (tmp_path / "escape").exists()


async def test_a_write_is_invisible_until_commit_and_discard_leaves_nothing(
    store: FilesystemStore,
) -> None:
    async with store.writer("k/v") as w:
        await w.write(b"partial")
        assert await store.stat("k/v") is None
        assert len(_leftovers(store)) == 1
        w.discard()
    assert await store.stat("k/v") is None
    assert _leftovers(store) == []


async def test_an_error_or_cancel_mid_write_leaves_nothing(store: FilesystemStore) -> None:
    with pytest.raises(RuntimeError):
        async with store.writer("k/err") as w:
            await w.write(b"x" * 1000)
            raise RuntimeError("client went away")
    with trio.move_on_after(0.05):
        async with store.writer("k/cancel") as w:
            while True:
                await w.write(b"y" * 65536)
                await trio.sleep(0.001)
    assert await store.stat("k/err") is None and await store.stat("k/cancel") is None
    assert _leftovers(store) == []


async def test_max_bytes_is_enforced_while_writing(store: FilesystemStore) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(10):
            yield b"z" * 100

    with pytest.raises(TooLarge):
        await store.put("k/big", chunks(), max_bytes=950)
    assert await store.stat("k/big") is None and _leftovers(store) == []
    assert (await store.put("k/fits", chunks(), max_bytes=1000)).size == 1000


async def test_key_conflicts(store: FilesystemStore) -> None:
    await put_bytes(store, "a/b", b"object")
    with pytest.raises(KeyConflict):
        await put_bytes(store, "a/b/c", b"under an object")
    with pytest.raises(KeyConflict):
        await put_bytes(store, "a", b"over a prefix")
    assert await get_bytes(store, "a/b") == b"object"
    assert _leftovers(store) == []


async def test_replacing_keeps_readers_on_their_version(store: FilesystemStore) -> None:
    old, new = b"A" * 3_000_000, b"B" * 2_000_000
    await put_bytes(store, "k/v", old)
    async with store.reader("k/v", chunk_bytes=65536) as reader:
        chunks = reader.chunks()
        first = await chunks.__anext__()
        await put_bytes(store, "k/v", new)  # replaced while the reader is half way
        rest = b"".join([c async for c in chunks])
    assert first + rest == old
    assert await get_bytes(store, "k/v") == new


async def test_concurrent_readers_during_writes_never_see_partial_content(
    store: FilesystemStore,
) -> None:
    versions = [bytes([65 + i]) * (1_000_000 + 7919 * i) for i in range(6)]
    digests = {hashlib.sha256(v).hexdigest() for v in versions}
    await put_bytes(store, "k/hot", versions[0])
    seen: list[str] = []
    writing = True

    async def writer() -> None:
        nonlocal writing
        for version in versions[1:] * 3:
            async with store.writer("k/hot") as w:
                for i in range(0, len(version), 100_000):
                    await w.write(version[i : i + 100_000])
                    await trio.lowlevel.checkpoint()
                await w.commit()
        writing = False

    async def reader() -> None:
        while writing:
            data = await get_bytes(store, "k/hot")
            seen.append(hashlib.sha256(data).hexdigest())
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer)
        for _ in range(4):
            nursery.start_soon(reader)
    assert seen and set(seen) <= digests
    assert _leftovers(store) == []


async def test_stale_temp_files_are_removed_at_open(tmp_path: Path) -> None:
    store = FilesystemStore(tmp_path / "artifacts")
    await store.open()
    stale = store.tmp_dir / "old.part"
    fresh = store.tmp_dir / "live.part"
    stale.write_bytes(b"x")
    fresh.write_bytes(b"y")
    past = time.time() - STALE_TEMP_SEC - 10
    os.utime(stale, (past, past))
    await FilesystemStore(tmp_path / "artifacts").open()
    assert not stale.exists() and fresh.exists()


async def test_zip_stream_holds_every_object_with_relative_names(store: FilesystemStore) -> None:
    blobs = {"job_9/out/a.txt": b"alpha", "job_9/out/deep/b.bin": os.urandom(700_000)}
    for key, data in blobs.items():
        await put_bytes(store, key, data)
    await put_bytes(store, "job_10/other.txt", b"not mine")
    objects = await store.list("job_9")
    parts = [chunk async for chunk in zip_objects(store, objects, "job_9")]
    assert len(parts) > 1  # streamed, not one blob
    with zipfile.ZipFile(io.BytesIO(b"".join(parts))) as zf:
        assert zf.testzip() is None
        assert sorted(zf.namelist()) == ["out/a.txt", "out/deep/b.bin"]
        assert zf.read("out/deep/b.bin") == blobs["job_9/out/deep/b.bin"]
