"""A closed-loop HTTP/1.1 load generator: C keep-alive connections, one request in flight each.

    python -m bench.httpload --port P [--path /healthz] [--method GET] [--body JSON]
        [--connections 50] [--seconds 5] [--warmup 1] [--count N] [--rate R] [--ids]

Built on asyncio protocols (stdlib, no per-request coroutine): it drove the minimal h11
server at 5,000-8,500 req/s on the 2-core VM, far above what it measures. Loopback
only. With ``--rate R`` requests are paced to R/s in all (each connection at its own even
interval) instead of back to back. A run is bounded by ``--seconds`` (after
``--warmup``) or by ``--count`` requests (then ``--seconds`` is the time limit).
Responses are parsed just enough to find their end (Content-Length or chunked). Prints
ONE JSON object: requests/s in the measured window, latency p50/p90/p99/max, status
counts, and with ``--ids`` the (monotonic submit time, job id) of every 2xx answer that
carries a job id.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
import time
from typing import Any

from bench.common import LOOPBACK, latency_summary

_CL = re.compile(rb"\r\ncontent-length:\s*(\d+)", re.IGNORECASE)
_CHUNKED = re.compile(rb"\r\ntransfer-encoding:\s*chunked", re.IGNORECASE)
_JOB_ID = re.compile(rb'"job_id":\s*"(job_[A-Za-z0-9_]+)"')


class Run:
    def __init__(self, args: argparse.Namespace, request: bytes) -> None:
        self.request = request
        self.count_limit: int | None = args.count
        self.collect_ids: bool = args.ids
        self.started = 0  # requests sent (count mode)
        self.done = 0
        self.measure_from = 0.0
        self.measure_to = float("inf")
        self.latencies: list[float] = []
        self.statuses: dict[int, int] = {}
        self.errors: dict[str, int] = {}
        self.ids: list[tuple[float, str]] = []
        self.first_bad: str | None = None
        self.finished = asyncio.get_running_loop().create_future()
        self.open = 0
        #: paced mode: seconds between two requests of one connection
        self.interval = args.connections / args.rate if args.rate else 0.0

    def may_send(self) -> bool:
        if time.monotonic() >= self.measure_to:
            return False
        if self.count_limit is not None and self.started >= self.count_limit:
            return False
        self.started += 1
        return True

    def record(self, sent: float, status: int, body: bytes) -> None:
        now = time.monotonic()
        self.done += 1
        if self.measure_from <= sent and now <= self.measure_to:
            self.latencies.append(now - sent)
            self.statuses[status] = self.statuses.get(status, 0) + 1
            if self.collect_ids and 200 <= status < 300:
                m = _JOB_ID.search(body)
                if m:
                    self.ids.append((sent, m.group(1).decode()))
        if status >= 400 and self.first_bad is None:
            self.first_bad = body[:300].decode(errors="replace")
        if self.count_limit is not None and self.done >= self.count_limit:
            self._finish()

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1

    def closed(self) -> None:
        self.open -= 1
        if self.open <= 0:
            self._finish()

    def _finish(self) -> None:
        if not self.finished.done():
            self.finished.set_result(None)


class Conn(asyncio.Protocol):
    def __init__(self, run: Run) -> None:
        self.run = run
        self.buf = bytearray()
        self.sent_at = 0.0
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.next_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self._next()

    def _next(self) -> None:
        assert self.transport is not None
        if not self.run.may_send():
            self.busy = False
            self.transport.close()
            return
        self.busy = True
        if self.run.interval:  # paced: this connection's next slot
            now = time.monotonic()
            if not self.next_at:
                self.next_at = now + self.run.interval * random.random()
            delay = self.next_at - now
            self.next_at = max(self.next_at, now) + self.run.interval
            if delay > 0:
                asyncio.get_running_loop().call_later(delay, self._send)
                return
        self._send()

    def _send(self) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        self.sent_at = time.monotonic()
        self.transport.write(self.run.request)

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buf[: end + 2])
            m = _CL.search(head)
            if m:
                total = end + 4 + int(m.group(1))
                if len(self.buf) < total:
                    return
                body = bytes(self.buf[end + 4 : total])
            elif _CHUNKED.search(head):
                term = self.buf.find(b"\r\n0\r\n\r\n", end)
                if term < 0:
                    if self.buf.startswith(b"0\r\n\r\n", end + 4):
                        term = end + 2
                    else:
                        return
                total = term + 7
                body = bytes(self.buf[end + 4 : total])
            else:
                total = end + 4
                body = b""
            status = int(head[9:12])
            del self.buf[:total]
            self.run.record(self.sent_at, status, body)
            if self.transport is not None and not self.transport.is_closing():
                self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.busy:
            self.run.error(type(exc).__name__ if exc else "closed by server")
        self.run.closed()


def build_request(args: argparse.Namespace) -> bytes:
    body = args.body.encode() if args.body else b""
    lines = [
        f"{args.method} {args.path} HTTP/1.1",
        f"Host: {LOOPBACK}:{args.port}",
        "User-Agent: runplane-bench",
    ]
    if body:
        lines += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    lines += list(args.header)
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    run = Run(args, build_request(args))
    loop = asyncio.get_running_loop()
    t0 = time.monotonic()
    run.measure_from = t0 + (0.0 if args.count else args.warmup)
    run.measure_to = t0 + (0.0 if args.count else args.warmup) + args.seconds
    transports = []
    for _ in range(args.connections):
        try:
            transport, _proto = await loop.create_connection(lambda: Conn(run), LOOPBACK, args.port)
        except OSError as exc:
            run.error(f"connect: {exc.__class__.__name__}")
            continue
        run.open += 1
        transports.append(transport)
    if run.open == 0:
        run._finish()
    try:
        await asyncio.wait_for(asyncio.shield(run.finished), run.measure_to - t0 + 30.0)
    except TimeoutError:
        run.error("run timeout")
    for transport in transports:
        transport.close()
    t_end = min(time.monotonic(), run.measure_to)
    window = max(t_end - run.measure_from, 1e-9)
    ok = sum(n for s, n in run.statuses.items() if 200 <= s < 400)
    out: dict[str, Any] = {
        "method": args.method,
        "path": args.path,
        "connections": args.connections,
        "seconds": round(window, 3),
        "requests": len(run.latencies),
        "ok": ok,
        "rps": round(len(run.latencies) / window, 1),
        "ok_rps": round(ok / window, 1),
        "latency": latency_summary(run.latencies),
        "statuses": {str(k): v for k, v in sorted(run.statuses.items())},
        "errors": run.errors,
    }
    if run.first_bad:
        out["first_error_body"] = run.first_bad
    if args.ids:
        out["ids"] = run.ids
    return out


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/healthz")
    parser.add_argument("--method", default="GET")
    parser.add_argument("--body", default="")
    parser.add_argument("--header", action="append", default=[], help="'Name: value'")
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--count", type=int, default=None, help="stop after N requests")
    parser.add_argument("--ids", action="store_true", help="report job ids and submit times")
    parser.add_argument(
        "--rate", type=float, default=None, help="pace to this many requests/s in all"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.connections <= 5000:
        parser.error("--connections must be 1..5000")
    if args.seconds > 600 or (args.count is not None and args.count > 1_000_000):
        parser.error("runs are bounded: --seconds <= 600, --count <= 1,000,000")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    result = asyncio.run(main_async(args))
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
