"""teleop_rtt: teleop frames to a pod and back, send -> echoed chunk received over SSE.

    python -m bench.teleop_rtt [--quick] [--rate HZ] [--seconds S]

A server, a real ``runplane agent`` process and a pod (``bench.pods.ECHO``) that appends
each teleop frame it reads from ``bench.teleop`` back onto its stream ``bench``. The client
(this process) subscribes, follows the stream over SSE, and sends frames
``{"n": i, "t": ...}`` at HZ (default 100) for S seconds (30; quick 5), one after another
(each waits for its 202, so frames of this one sender stay in order). Figures: round trip
from just before the POST to the echoed chunk's arrival (p50/p99/max), the POST's own
202 latency, frames lost, whether the echoes came back in order, the rate achieved.
Target: p99 < 20 ms on loopback, 0 lost, in order. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import httpx
import trio

from bench import common, pods


async def measure(url: str, job: str, ticket: str, rate: float, seconds: float) -> dict[str, Any]:
    count = int(rate * seconds)
    sent: dict[int, float] = {}
    got: dict[int, float] = {}
    order: list[int] = []
    post_latency: list[float] = []
    statuses: dict[int, int] = {}
    all_back = trio.Event()
    headers = {"Authorization": f"Bearer {ticket}"}
    async with (
        httpx.AsyncClient(base_url=url, timeout=30) as client,
        httpx.AsyncClient(base_url=url, timeout=None) as sse,
        trio.open_nursery() as nursery,
    ):

        async def follow(task_status: trio.TaskStatus[None]) -> None:
            path = f"/v1/jobs/{job}/streams/bench/data"
            async with sse.stream("GET", path, headers=headers) as response:
                task_status.started()
                async for line in response.aiter_lines():
                    if not line.startswith("data: "):
                        continue
                    now = time.monotonic()
                    chunk = json.loads(line[6:])
                    echo = json.loads(chunk["data"]).get("echo") if "data" in chunk else None
                    if echo and "n" in echo:
                        got.setdefault(echo["n"], now)
                        order.append(echo["n"])
                        if len(got) >= count:
                            all_back.set()

        await nursery.start(follow)
        start = trio.current_time()
        for i in range(count):
            await trio.sleep_until(start + i / rate)
            t = time.monotonic()
            sent[i] = t
            response = await client.post(
                f"/v1/jobs/{job}/streams/bench/teleop", json={"n": i, "t": t}, headers=headers
            )
            post_latency.append(time.monotonic() - t)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        elapsed = trio.current_time() - start
        with trio.move_on_after(5):
            await all_back.wait()
        await client.post(
            f"/v1/jobs/{job}/streams/bench/teleop", json={"stop": True}, headers=headers
        )
        nursery.cancel_scope.cancel()
    rtt = [got[n] - sent[n] for n in sent if n in got]
    return {
        "frames": count,
        "rate_achieved_hz": round(count / elapsed, 1) if elapsed else None,
        "rtt": common.latency_summary(rtt),
        "post_202": common.latency_summary(post_latency),
        "statuses": statuses,
        "lost": count - len(got),
        "in_order": order == sorted(order) and len(order) == len(set(order)),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=None)
    args = parser.parse_args(argv)
    seconds = args.seconds or (5.0 if args.quick else 30.0)
    started = time.monotonic()
    result: dict[str, Any] = {
        "bench": "teleop_rtt",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {"rate_hz": args.rate, "seconds": seconds, "agent": "runplane agent process"},
    }
    with common.server() as srv:
        agent = pods.start_agent(srv)
        try:
            job = pods.run_pod(srv.port, pods.ECHO, {})
            ticket = pods.subscribe(srv.port, job)["ticket"]
            figures = trio.run(measure, srv.url, job, ticket, args.rate, seconds)
        finally:
            common.stop(agent)  # type: ignore[arg-type]
    result.update(figures)
    p99 = (figures["rtt"] or {}).get("p99_ms")
    result["targets"] = {
        "rtt_p99_ms < 20": p99 is not None and p99 < 20,
        "lost == 0": figures["lost"] == 0,
        "in_order": figures["in_order"],
    }
    return common.finish(result, started)


if __name__ == "__main__":
    main()
