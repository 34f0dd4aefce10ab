"""S Server-Sent-Events subscribers on one job, checking order and timing every line.

    python -m bench.ssesub --port P --job JOB_ID --subscribers S [--seconds T]
        [--stream NAME --ticket TICKET [--stalled K]]

With ``--stream`` they follow that realtime stream (``GET .../streams/NAME/data?ticket=``)
instead: chunks whose data is ``{"n": <n>, "t": <monotonic send time>}`` are checked and
timed the same way, ``event: lagged`` markers are counted (a lag is an explicit gap, not
disorder), and a chunk ``{"end": true}`` ends a subscriber. ``--stalled K`` adds K more
subscribers that stop reading once they have their headers (they must not slow the rest).

Opens S keep-alive connections to ``GET /v1/jobs/{id}/events`` (asyncio protocols, one
process), prints ``{"ready": n}`` once every subscriber has its ``200`` headers, then reads
until each stream ends (after the job's terminal ``phase`` event) or ``--seconds`` pass.
Log lines are expected as ``"<n> <monotonic send time>"`` (``bench.simagents --mode
log``): each subscriber checks that event seqs rise by exactly one and line numbers run
0, 1, 2, ... with no gap, duplicate or reordering; delivery latency is the arrival time
minus the send time (both CLOCK_MONOTONIC, so comparable across processes on one host).
Prints ONE summary JSON object. Loopback only, bounded by ``--seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from typing import Any

from bench.common import LOOPBACK, latency_summary

_LINE = re.compile(rb'"line":\s*"(\d+) ([\d.]+)"')
_PHASE = re.compile(rb'"phase":\s*"(\w+)"')
_CHUNK = re.compile(rb'\\"n\\":\s*(\d+),\s*\\"t\\":\s*([\d.]+)')
_RESUME = re.compile(rb'"resume_seq":\s*(\d+)')
_FRAME_ANY = re.compile(rb"(?:id: (\d+)\n)?event: (\w+)\ndata: ([^\n]*)\n\n")
TERMINAL = {b"succeeded", b"failed", b"timeout", b"cancelled"}


class Sub(asyncio.Protocol):
    def __init__(self, shared: Shared, request: bytes) -> None:
        self.shared = shared
        self.request = request
        self.buf = b""
        self.headers_done = False
        self.status = 0
        self.last_seq = -1
        self.next_line = 0
        self.lines = 0
        self.lagged = 0
        self.disorder = 0
        self.ended = False
        self.closed = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic()
        buf = self.buf + data
        if not self.headers_done:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                self.buf = buf
                return
            self.status = int(buf[9:12])
            self.headers_done = True
            self.shared.headers(self)
            buf = buf[end + 4 :]
        pos = 0
        lat = self.shared.latencies
        for m in _FRAME_ANY.finditer(buf):
            pos = m.end()
            kind = m.group(2)
            if kind == b"lagged":  # an explicit gap: resume where the server says
                self.lagged += 1
                resume = _RESUME.search(m.group(3))
                if resume is not None:
                    self.last_seq = int(resume.group(1)) - 1
                self.next_line = -1
                continue
            seq = int(m.group(1) or 0)
            if self.last_seq >= 0 and seq != self.last_seq + 1:
                self.disorder += 1
            self.last_seq = seq
            if kind == b"stream":
                chunk = _CHUNK.search(m.group(3))
                if chunk is None:
                    self.ended = self.ended or b'\\"end\\"' in m.group(3)
                    continue
                n = int(chunk.group(1))
                if self.next_line >= 0 and n != self.next_line:
                    self.disorder += 1
                self.next_line = n + 1
                self.lines += 1
                lat.append(now - float(chunk.group(2)))
                self.shared.last_line = now
                if self.shared.first_line is None:
                    self.shared.first_line = now
            elif kind == b"log":
                line = _LINE.search(m.group(3))
                if line is None:
                    continue  # a system line
                n = int(line.group(1))
                if n != self.next_line:
                    self.disorder += 1
                self.next_line = n + 1
                self.lines += 1
                lat.append(now - float(line.group(2)))
                self.shared.last_line = now
                if self.shared.first_line is None:
                    self.shared.first_line = now
            elif kind == b"phase":
                phase = _PHASE.search(m.group(3))
                if phase and phase.group(1) in TERMINAL:
                    self.ended = True
        rest = buf[pos:]
        # keep an incomplete frame; drop chunk framing and keepalives already passed
        cut = max(rest.rfind(b"id: "), rest.rfind(b"event: lagged"))
        self.buf = rest[cut:] if cut >= 0 else rest[-64:]
        if self.ended and self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.closed.done():
            self.closed.set_result(None)


class Shared:
    def __init__(self, total: int) -> None:
        self.total = total
        self.with_headers = 0
        self.latencies: list[float] = []
        self.first_line: float | None = None
        self.last_line: float | None = None
        self.all_headers = asyncio.get_running_loop().create_future()

    def headers(self, sub: Sub) -> None:
        self.with_headers += 1
        if self.with_headers >= self.total and not self.all_headers.done():
            self.all_headers.set_result(None)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    shared = Shared(args.subscribers)
    path = f"/v1/jobs/{args.job}/events"
    if args.stream:
        path = f"/v1/jobs/{args.job}/streams/{args.stream}/data?ticket={args.ticket}"
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {LOOPBACK}:{args.port}\r\n"
        "Accept: text/event-stream\r\nUser-Agent: runplane-bench\r\n\r\n"
    ).encode()
    stalled: list[asyncio.Transport] = []

    class Stalled(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            assert isinstance(transport, asyncio.Transport)
            transport.write(request)
            transport.pause_reading()  # never reads: the server's socket buffer fills
            stalled.append(transport)

    subs: list[Sub] = []
    errors: dict[str, int] = {}
    sem = asyncio.Semaphore(100)

    async def connect() -> None:
        async with sem:
            try:
                _, sub = await loop.create_connection(
                    lambda: Sub(shared, request), LOOPBACK, args.port
                )
            except OSError as exc:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
                shared.total -= 1
                return
            subs.append(sub)

    t0 = time.monotonic()
    for _ in range(args.stalled):
        await loop.create_connection(Stalled, LOOPBACK, args.port)
    await asyncio.gather(*(connect() for _ in range(args.subscribers)))
    try:
        await asyncio.wait_for(shared.all_headers, 60)
    except TimeoutError:
        errors["headers timeout"] = 1
    connect_s = time.monotonic() - t0
    sys.stdout.write(json.dumps({"ready": shared.with_headers, "connect_s": round(connect_s, 2)}))
    sys.stdout.write("\n")
    sys.stdout.flush()
    t1 = time.monotonic()
    try:
        await asyncio.wait_for(
            asyncio.gather(*(s.closed for s in subs)), max(1.0, args.seconds - (t1 - t0))
        )
    except TimeoutError:
        errors["run timeout"] = 1
    for s in subs:
        if s.transport is not None:
            s.transport.close()
    for transport in stalled:
        transport.close()
    lines = [s.lines for s in subs]
    return {
        "subscribers": len(subs),
        "with_200": sum(1 for s in subs if s.status == 200),
        "connect_s": round(connect_s, 2),
        "ended": sum(1 for s in subs if s.ended),
        "lines_min": min(lines) if lines else 0,
        "lines_max": max(lines) if lines else 0,
        "lines_total": sum(lines),
        "out_of_order": sum(s.disorder for s in subs),
        "lagged_markers": sum(s.lagged for s in subs),
        "stalled": len(stalled),
        "latency": latency_summary(shared.latencies),
        "first_line_at": shared.first_line,
        "last_line_at": shared.last_line,
        "errors": errors,
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--job", required=True)
    parser.add_argument("--subscribers", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--stream", default="")
    parser.add_argument("--ticket", default="")
    parser.add_argument("--stalled", type=int, default=0)
    args = parser.parse_args(argv)
    if not 1 <= args.subscribers <= 5000 or args.seconds > 600:
        parser.error("bounded: --subscribers 1..5000, --seconds <= 600")
    result = asyncio.run(main_async(args))
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
