"""sse_write: the server's CPU per SSE write, lean SSE writer against Quart's iteration.

    python -m bench.sse_write [--followers N] [--chunks K] [--rounds R]

Not a scenario of ``python -m bench`` (a helper of docs/benchmarks.md, "lean lanes:
server-sent events"). Each round runs two fresh server processes, one per lane: the app
served by hypercorn in-process (runplane's serving config) either through its own stack
(``lean``: the lean SSE layer writes the frames) or through what ``create_app`` builds
with ``RUNPLANE_LEAN_LANES=0`` (``quart``). N followers (another process, raw sockets)
follow one stream of a finished job; the server publishes K chunks one per millisecond
on the stream's ring, so with N below the coalescing threshold (16) every chunk is one
write per follower, then closes it. Figure: the server process's CPU time over the run,
less the same wall time idle, per write (N x K). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import inspect
import json
import logging
import subprocess
import sys
import tempfile
import time
from functools import partial
from typing import Any

import trio

from bench import common

LANES = ("quart", "lean")


async def _client(port: int, followers: int, path: str) -> None:
    totals: list[int] = []

    async def one() -> None:
        stream = await trio.open_tcp_stream(common.LOOPBACK, port)
        await stream.send_all(
            f"GET {path} HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n".encode()
        )
        got = 0
        while data := await stream.receive_some(1 << 16):
            got += len(data)
        totals.append(got)

    async with trio.open_nursery() as nursery:
        for _ in range(followers):
            nursery.start_soon(one)
    print(sum(totals), flush=True)


async def _until(check: Any) -> None:
    """Poll ``check`` (plain or async) until it holds."""
    while True:
        held = check()
        if await held if inspect.isawaitable(held) else held:
            return
        await trio.sleep(0.001)


async def _serve(lane: str, followers: int, chunks: int) -> dict[str, Any]:
    from hypercorn.trio import serve

    from runplane.http import serving
    from runplane.http.app import create_app
    from runplane.http.middleware import RequestLogMiddleware
    from runplane.settings import load_settings
    from runplane.streams.chunks import StreamChunk, ring_name

    logging.getLogger("runplane.http").setLevel(logging.WARNING)  # no line per follow
    data_dir = tempfile.mkdtemp(prefix="sse_write.")
    settings = load_settings(
        {"RUNPLANE_DATA_DIR": data_dir, "RUNPLANE_LOCAL_AGENT": "0", "RUNPLANE_AUTH": "off"}
    )
    app = create_app(settings)
    # RUNPLANE_LEAN_LANES=0's stack: the request log around what the lanes wrap
    without = RequestLogMiddleware(app.asgi_app.app.app)

    async def entry(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan" or lane == "lean":
            await app(scope, receive, send)
        else:
            await without(scope, receive, send)

    config = serving.Config()
    config.bind = [f"{common.LOOPBACK}:0"]
    config.accesslog = None
    config.graceful_timeout = 1
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve, entry, config, shutdown_trigger=stop.wait))
        port = int(binds[0].rsplit(":", 1)[1])
        client = app.test_client()
        submitted = await client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})
        job = (await submitted.get_json())["job_id"]
        await client.post(f"/v1/jobs/{job}/cancel")

        async def cancelled() -> bool:
            view = await (await client.get(f"/v1/jobs/{job}")).get_json()
            return bool(view["phase"] == "cancelled")

        await _until(cancelled)
        svc = app.extensions["runplane"]
        saved = json.dumps({"b": {"kind": "data", "count": 0, "last_seq": 0}})
        await svc.store.execute("UPDATE jobs SET streams = ? WHERE id = ?", (saved, job))
        ring = svc.root.streams.hub.ring(ring_name(job, "b"), capacity=4096)
        argv = [sys.executable, "-m", "bench.sse_write", "client", str(port), str(followers)]
        proc = await trio.lowlevel.open_process(
            [*argv, f"/v1/jobs/{job}/streams/b/data"], stdout=subprocess.PIPE
        )
        await _until(lambda: ring.subscribers == followers)
        await trio.sleep(0.3)
        cpu, wall = time.process_time(), time.perf_counter()
        payload = json.dumps({"n": 1, "t": 12345.678901})
        for _ in range(chunks):
            seq = ring.last_seq + 1
            ring.publish(StreamChunk(seq, "b", "data", "json", 1_700_000_000_000 + seq, payload))
            await trio.sleep(0.001)
        ring.close()
        await _until(lambda: ring.subscribers == 0)
        busy, wall = time.process_time() - cpu, time.perf_counter() - wall
        assert proc.stdout is not None
        received = int(await proc.stdout.receive_some(100))
        await proc.wait()
        idle = time.process_time()
        await trio.sleep(wall)
        idle = time.process_time() - idle
        stop.set()
    writes = followers * chunks
    return {
        "lane": lane,
        "cpu_s": round(busy, 3),
        "idle_cpu_s": round(idle, 3),
        "us_per_write": round((busy - idle) / writes * 1e6, 1),
        "bytes_received": received,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["client"]:
        trio.run(_client, int(args[1]), int(args[2]), args[3])
        return {}
    if args[:1] == ["serve"]:
        result = trio.run(_serve, args[1], int(args[2]), int(args[3]))
        print(json.dumps(result), flush=True)
        return result
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--followers", type=int, default=10)
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    opts = parser.parse_args(args)
    started = time.monotonic()
    machine = {**common.machine(), "loadavg_before": common.loadavg()}
    runs: dict[str, list[float]] = {lane: [] for lane in LANES}
    for _ in range(opts.rounds):
        for lane in LANES:
            one = ["bench.sse_write", "serve", lane, str(opts.followers), str(opts.chunks)]
            out = common.run_json(one, timeout=300)
            runs[lane].append(out["us_per_write"])
    result: dict[str, Any] = {
        "bench": "sse_write",
        "machine": machine,
        "settings": {"followers": opts.followers, "chunks": opts.chunks, "rounds": opts.rounds},
        "us_per_write": runs,
        "ratio_lean_to_quart": common.ratio(min(runs["lean"]), min(runs["quart"])),
    }
    return common.finish(result, started)


if __name__ == "__main__":
    main()
