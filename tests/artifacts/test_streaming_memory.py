"""A 200 MB artifact through a real ``runplane serve`` process: PUT then GET, while the
server's resident memory (VmRSS of that process, read from /proc) is sampled every 20 ms.

What is measured is the serving process alone (not this test process, which generates and
checks the bytes): its RSS must stay flat, i.e. grow by far less than the body, because
bodies stream one chunk at a time in both directions."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest
import trio

SIZE_MB = 200
CHUNK = 1024 * 1024
#: Allowed growth of the server's RSS over its warmed-up baseline, far below the 200 MB body.
FLAT_MB = 48


def _rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, int]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    env.update(
        {
            "RUNPLANE_DATA_DIR": str(tmp_path / "server"),
            "RUNPLANE_DATABASE_URL": "memory",
            "RUNPLANE_LOCAL_AGENT": "0",
            "RUNPLANE_MAX_UPLOAD_MB": "512",
        }
    )
    log = tmp_path / "server.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runplane", "serve", "--port", "0"],
        env=env,
        stderr=log.open("wb"),
        stdout=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        url = None
        while url is None and time.monotonic() < deadline and proc.poll() is None:
            for line in log.read_text(errors="replace").splitlines():
                if '"listening"' in line:
                    url = json.loads(line)["urls"][0]
            time.sleep(0.05)
        assert url, f"the server did not start: {log.read_text(errors='replace')[-2000:]}"
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def _chunks(seed: bytes) -> Iterator[bytes]:
    for i in range(SIZE_MB):
        yield hashlib.sha256(seed + i.to_bytes(4, "big")).digest() * (CHUNK // 32)


async def test_200mb_round_trip_keeps_server_memory_flat(served: tuple[str, int]) -> None:
    url, pid = served
    expected = hashlib.sha256()
    for chunk in _chunks(b"round-trip"):
        expected.update(chunk)
    async with httpx.AsyncClient(base_url=url, timeout=120) as client:
        # warm up the code paths, then take the baseline
        warm = b"w" * (4 * CHUNK)
        assert (await client.put("/v1/artifacts/warm/up.bin", content=warm)).status_code == 201
        assert (await client.get("/v1/artifacts/warm/up.bin")).content == warm
        await trio.sleep(0.2)
        baseline = _rss_kb(pid)
        peak = baseline
        done = trio.Event()

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, _rss_kb(pid))
                await trio.sleep(0.02)

        async def body() -> AsyncIterator[bytes]:
            for chunk in _chunks(b"round-trip"):
                yield chunk

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sample)
            started = trio.current_time()
            put = await client.put(
                "/v1/artifacts/big/blob.bin",
                content=body(),
                headers={"Content-Length": str(SIZE_MB * CHUNK)},
            )
            put_sec = trio.current_time() - started
            assert put.status_code == 201, put.text
            assert put.headers["x-sha256"] == expected.hexdigest()
            assert put.headers["x-size"] == str(SIZE_MB * CHUNK)
            got = hashlib.sha256()
            size = 0
            started = trio.current_time()
            async with client.stream("GET", "/v1/artifacts/big/blob.bin") as response:
                assert response.status_code == 200
                assert response.headers["content-length"] == str(SIZE_MB * CHUNK)
                async for chunk in response.aiter_raw():
                    got.update(chunk)
                    size += len(chunk)
            get_sec = trio.current_time() - started
            done.set()
        assert size == SIZE_MB * CHUNK
        assert got.hexdigest() == expected.hexdigest()
    growth_mb = (peak - baseline) / 1024
    print(
        f"server RSS baseline {baseline / 1024:.1f} MiB, peak {peak / 1024:.1f} MiB "
        f"(+{growth_mb:.1f} MiB); PUT {SIZE_MB / put_sec:.0f} MB/s, GET {SIZE_MB / get_sec:.0f} MB/s"
    )
    assert growth_mb < FLAT_MB, f"server RSS grew by {growth_mb:.1f} MiB for a {SIZE_MB} MB body"
