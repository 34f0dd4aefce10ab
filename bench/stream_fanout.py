"""stream_fanout: S ticketed SSE subscribers on one realtime stream while a pod writes C
chunks/s, plus K subscribers that never read.

    python -m bench.stream_fanout [--quick] [--subscribers S] [--rate C] [--seconds D]
        [--stalled K]

A server, a real ``runplane agent`` process and a pod (``bench.pods.PRODUCER``) that
writes ``{"n": i, "t": <monotonic>}`` lines to its stream ``bench`` at C/s for D seconds.
S subscribers (``bench.ssesub --stream``, one process) follow ``GET .../data?ticket=``
with one stream ticket; K more connect and never read (their socket buffers fill). The
run is done twice, without and with the stalled ones, on fresh servers. Figures per run:
chunks delivered/s (all subscribers), delivery latency p50/p99 (pod write -> subscriber
receive: agent inotify, WebSocket, job actor, ring, SSE), every chunk in order or an
explicit lagged marker. Targets: S=1,000 at C=100/s with p99 < 100 ms; the stalled
subscribers do not move the others' p99 (ratio with/without). Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bench import common, pods


def one_run(subs: int, rate: float, secs: float, stalled: int) -> dict[str, Any]:
    limit = secs + 90
    with common.server() as srv:
        agent = pods.start_agent(srv)
        sse = None
        try:
            env = {"RATE": str(rate), "SECONDS": str(secs), "START_DELAY": "15"}
            job = pods.run_pod(srv.port, pods.PRODUCER, env)
            ticket = pods.subscribe(srv.port, job)["ticket"]
            sse = common.spawn(
                ["bench.ssesub", "--port", str(srv.port), "--job", job, "--subscribers",
                 str(subs), "--seconds", str(limit), "--stream", "bench", "--ticket", ticket,
                 "--stalled", str(stalled)]
            )  # fmt: skip
            ready = common.read_json_line(sse, 60.0)
            meter = common.CpuMeter(srv.pid).start()
            delivered = common.read_json_line(sse, limit + 30)
            server_cpu = meter.stop()
        finally:
            if sse is not None:
                common.stop(sse)
            common.stop(agent)  # type: ignore[arg-type]
    sent = int(rate * secs)
    window = (delivered["last_line_at"] or 0) - (delivered["first_line_at"] or 0)
    complete = delivered["lines_min"] == sent and delivered["lagged_markers"] == 0
    return {
        "stalled": stalled,
        "chunks_sent": sent,
        "delivered_per_s": round(delivered["lines_total"] / window, 1) if window > 0 else None,
        "latency_ms": {k: delivered["latency"][k] for k in ("p50_ms", "p99_ms", "max_ms")},
        "in_order": delivered["out_of_order"] == 0,
        "every_chunk": complete,
        "lagged_markers": delivered["lagged_markers"],
        "subscribers_ready": ready.get("ready"),
        "server_cpu_share": server_cpu,
        "subscribers": delivered,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--subscribers", type=int, default=None)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=None)
    parser.add_argument("--stalled", type=int, default=10)
    args = parser.parse_args(argv)
    subs = args.subscribers or (100 if args.quick else 1000)
    secs = args.seconds or (5.0 if args.quick else 10.0)
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "stream_fanout",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {"subscribers": subs, "rate": args.rate, "seconds": secs},
    }
    base = one_run(subs, args.rate, secs, 0)
    with_stalled = one_run(subs, args.rate, secs, args.stalled)
    p99, p99_stalled = base["latency_ms"]["p99_ms"], with_stalled["latency_ms"]["p99_ms"]
    result.update(
        {
            "delivered_per_s": base["delivered_per_s"],
            "latency_ms": base["latency_ms"],
            "every_chunk_in_order": base["in_order"] and base["every_chunk"],
            "without_stalled": base,
            "with_stalled": with_stalled,
            "p99_ratio_stalled": common.ratio(p99_stalled, p99),
            "targets": {
                "1000 subscribers at 100 chunks/s": subs >= 1000 and args.rate >= 100,
                "p99_ms < 100": (p99 or 1e9) < 100,
                "every chunk, in order": base["in_order"] and base["every_chunk"],
                "stalled subscribers do not move p99 (< 100 ms with them)": (p99_stalled or 1e9)
                < 100,
            },
        }
    )
    return common.finish(result, started)


if __name__ == "__main__":
    main()
