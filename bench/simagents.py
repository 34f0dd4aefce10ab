"""Simulated node agents: K real WebSocket connections (trio-websocket) in one process.

    python -m bench.simagents --port P --agents K --mode complete [--expect N] [--seconds T]
    python -m bench.simagents --port P --agents A --mode idle --seconds T
    python -m bench.simagents --port P --agents 1 --mode log --lines-per-s L --log-seconds D

Each agent speaks the protocol of ``runplane/agent/protocol.py`` (its pydantic models
encode and decode the frames): ``hello`` with made-up facts (``--cores``, ``--slots``),
waits for ``welcome``, heartbeats every ``heartbeat_sec``, and on ``run``:

* ``complete``: reports ``running`` and ``succeeded`` at once (no process is started);
  stops when ``--expect`` finishes were acknowledged or after ``--seconds``;
* ``idle``: never gets work (nothing is submitted); stays connected for ``--seconds``;
* ``log``: reports ``running``, then sends log lines ``"<n> <monotonic send time>"`` at
  ``--lines-per-s`` in batches every 10 ms for ``--log-seconds``, then ``succeeded``.

Prints ``{"ready": ...}`` once every agent has its welcome, then ONE summary JSON object.
Loopback only; bounded by ``--seconds`` (and a hard limit of 600 s).
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import sys
import time
from typing import Any

import trio
from pydantic import ValidationError
from trio_websocket import WebSocketConnection, open_websocket_url

from bench.common import LOOPBACK
from runplane.agent import protocol as p


class Stats:
    def __init__(self, expect: int | None) -> None:
        self.expect = expect
        self.welcomed = 0
        self.runs = 0
        self.acks = 0
        self.lines_sent = 0
        self.errors: dict[str, int] = {}
        self.all_welcomed = trio.Event()
        self.done = trio.Event()
        self.first_run: float | None = None
        self.last_ack: float | None = None
        self.log_started: float | None = None
        self.log_ended: float | None = None

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


def hello(i: int, cores: int, slots: int) -> str:
    facts = p.Facts(
        name=f"sim-{i:05d}",
        cpu_cores=cores,
        ram_gb=cores * 4,
        disk_gb=100,
        arch="x86_64",
        os="linux",
        # simulated: runs nothing, enforces no limit (takes jobs with limits, best effort)
        capabilities=["process", "limits-best-effort"],
        max_concurrency=slots,
        dlperf=20.0,
    )
    return p.encode(p.Hello(protocol=p.PROTOCOL_VERSION, agent_version="bench", facts=facts))


async def send_logs(
    ws: WebSocketConnection, run: p.Run, stats: Stats, lines_per_s: float, seconds: float
) -> None:
    """Log ``lines_per_s`` for ``seconds``: batches every 10 ms, each line stamped."""
    step = 0.01
    n = 0
    start = trio.current_time()  # trio's clock paces; time.monotonic() stamps the lines
    stats.log_started = time.monotonic()
    total = int(lines_per_s * seconds)
    tick = 0
    while n < total:
        tick += 1
        due = min(total, math.ceil(lines_per_s * step * tick))
        now = time.monotonic()
        lines = [["stdout", f"{k} {now:.6f}"] for k in range(n, due)]
        if lines:
            msg = {
                "type": "job_logs",
                "job_id": run.job_id,
                "attempt": run.attempt,
                "lines": lines,
            }
            await ws.send_message(json.dumps(msg, separators=(",", ":")))
            stats.lines_sent += len(lines)
            n = due
        await trio.sleep_until(start + step * tick)
    stats.log_ended = time.monotonic()


async def agent(
    i: int, args: argparse.Namespace, stats: Stats, limiter: trio.CapacityLimiter
) -> None:
    url = f"ws://{LOOPBACK}:{args.port}/v1/nodes/connect"
    await limiter.acquire()  # bounded connect concurrency
    connecting = True
    try:
        async with open_websocket_url(url, connect_timeout=30, message_queue_size=64) as ws:
            await ws.send_message(hello(i, args.cores, args.slots))
            welcome = p.decode_server(await ws.get_message())
            assert isinstance(welcome, p.Welcome)
            limiter.release()
            connecting = False
            stats.welcomed += 1
            if stats.welcomed == args.agents:
                stats.all_welcomed.set()
            await serve_agent(ws, welcome, args, stats)
    except Exception as exc:  # a failed or lost connection is counted, not fatal
        leaf: BaseException = exc
        while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
            leaf = leaf.exceptions[0]
        what = f"{type(leaf).__name__}: {str(leaf).splitlines()[0][:120]}" if str(leaf) else ""
        stats.error(f"{'connect' if connecting else 'session'}: {what or type(leaf).__name__}")
    finally:
        if connecting:
            limiter.release()


async def serve_agent(
    ws: WebSocketConnection, welcome: p.Welcome, args: argparse.Namespace, stats: Stats
) -> None:
    running: dict[str, int] = {}
    async with trio.open_nursery() as nursery:

        async def heartbeat() -> None:
            while True:
                await trio.sleep(welcome.heartbeat_sec)
                beat = p.Heartbeat(
                    running=[p.RunningJob(job_id=j, attempt=a) for j, a in running.items()]
                )
                await ws.send_message(p.encode(beat))

        async def job(run: p.Run) -> None:
            await ws.send_message(
                p.encode(p.JobPhase(job_id=run.job_id, attempt=run.attempt, phase="running"))
            )
            if args.mode == "log":
                await send_logs(ws, run, stats, args.lines_per_s, args.log_seconds)
            await ws.send_message(
                p.encode(
                    p.JobFinished(
                        job_id=run.job_id, attempt=run.attempt, outcome="succeeded", exit_code=0
                    )
                )
            )

        nursery.start_soon(heartbeat)
        while True:
            raw = await ws.get_message()
            try:
                msg = p.decode_server(raw)
            except ValidationError:  # as the real agent: unknown server messages are ignored
                stats.error("ignored server message")
                continue
            if isinstance(msg, p.Run):
                stats.runs += 1
                if stats.first_run is None:
                    stats.first_run = time.monotonic()
                running[msg.job_id] = msg.attempt
                if args.mode == "log":
                    nursery.start_soon(job, msg)
                else:
                    await job(msg)
            elif isinstance(msg, p.FinishedAck):
                running.pop(msg.job_id, None)
                stats.acks += 1
                stats.last_ack = time.monotonic()
                if stats.expect is not None and stats.acks >= stats.expect:
                    stats.done.set()


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    stats = Stats(args.expect)
    limiter = trio.CapacityLimiter(args.connect_concurrency)
    t0 = time.monotonic()
    out: dict[str, Any] = {"agents": args.agents, "mode": args.mode}
    with trio.move_on_after(args.seconds + 60):
        async with trio.open_nursery() as nursery:
            for i in range(args.agents):
                nursery.start_soon(agent, i, args, stats, limiter)
            with trio.move_on_after(args.connect_timeout):
                await stats.all_welcomed.wait()
            connect_s = time.monotonic() - t0
            out["connect_s"] = round(connect_s, 2)
            out["welcomed"] = stats.welcomed
            sys.stdout.write(json.dumps({"ready": stats.welcomed, "connect_s": out["connect_s"]}))
            sys.stdout.write("\n")
            sys.stdout.flush()
            with (
                trio.move_on_after(args.seconds),
                trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals,
            ):
                async with trio.open_nursery() as waiting:

                    async def on_signal() -> None:
                        async for _ in signals:
                            waiting.cancel_scope.cancel()

                    waiting.start_soon(on_signal)
                    await stats.done.wait()  # never set in idle mode
                    waiting.cancel_scope.cancel()
            nursery.cancel_scope.cancel()
    out.update(
        {
            "runs": stats.runs,
            "acks": stats.acks,
            "lines_sent": stats.lines_sent,
            "errors": stats.errors,
            "first_run": stats.first_run,
            "last_ack": stats.last_ack,
            "log_started": stats.log_started,
            "log_ended": stats.log_ended,
        }
    )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--mode", choices=["complete", "idle", "log"], default="complete")
    parser.add_argument("--cores", type=int, default=8)
    parser.add_argument("--slots", type=int, default=4)
    parser.add_argument("--expect", type=int, default=None, help="stop after N acked finishes")
    parser.add_argument("--seconds", type=float, default=60.0, help="time limit after ready")
    parser.add_argument("--connect-timeout", type=float, default=120.0)
    parser.add_argument("--connect-concurrency", type=int, default=20)
    parser.add_argument("--lines-per-s", type=float, default=100.0)
    parser.add_argument("--log-seconds", type=float, default=5.0)
    args = parser.parse_args(argv)
    if not 1 <= args.agents <= 5000 or args.seconds > 600:
        parser.error("bounded: --agents 1..5000, --seconds <= 600")
    result = trio.run(main_async, args)
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
