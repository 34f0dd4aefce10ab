"""webhooks: outgoing webhook deliveries to a fast local receiver.

    python -m bench.webhooks [--quick] [--jobs N] [--rate R] [--burst M]

The server (``runplane serve``, its local agent on, loopback allowed by
``RUNPLANE_EGRESS_ALLOW``) has one endpoint pointing at a receiver in this process (trio +
h11 on loopback, answering 200 at once). Two figures:

* **firing delay**: N real jobs (``true``) paced at R/s; for each, the time from the run's
  end (``finished_at`` in the payload, stamped by the server when it stored the end) to
  the receiver reading the request: p50 / p99 / max;
* **deliveries/s**: M pending deliveries written straight into the SQLite file (as many
  as a burst of run ends would), then one test ping makes the dispatcher read them all:
  deliveries received per second, first to last.

Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import threading
import time
from datetime import datetime
from typing import Any

import h11
import httpx
import trio

from bench import common
from runplane.ids import new_id

ADMIN = "bench-admin-token-0123456789"


class Receiver:
    """Answers 200 to every POST; records (arrival unix seconds, body)."""

    def __init__(self) -> None:
        self.arrivals: list[tuple[float, bytes]] = []
        self.port = 0
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self._token: trio.lowlevel.TrioToken | None = None

    def start(self) -> Receiver:
        threading.Thread(target=trio.run, args=(self._main,), daemon=True).start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self._token is not None and self._stop is not None:
            self._token.run_sync_soon(self._stop.set)

    async def _main(self) -> None:
        self._stop = trio.Event()
        self._token = trio.lowlevel.current_trio_token()
        async with trio.open_nursery() as nursery:
            listeners = await nursery.start(trio.serve_tcp, self._handle, 0)
            self.port = listeners[0].socket.getsockname()[1]
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    async def _handle(self, stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        body = bytearray()
        async with stream:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(bytes(await stream.receive_some(65536)))
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    break
            self.arrivals.append((time.time(), bytes(body)))
            out = conn.send(h11.Response(status_code=200, headers=[("Content-Length", "0")]))
            out = (out or b"") + (conn.send(h11.EndOfMessage()) or b"")
            await stream.send_all(out)


def _finished_s(body: bytes) -> float | None:
    run = json.loads(body).get("run")
    if not run or not run.get("finished_at"):
        return None
    return datetime.fromisoformat(run["finished_at"].replace("Z", "+00:00")).timestamp()


def _wait(check: Any, limit: float) -> bool:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


def seed(db: Any, endpoint_id: str, n: int) -> None:
    """``n`` pending ping deliveries, as the server writes them."""
    now = int(time.time() * 1000)
    rows = [
        (new_id("dlv_"), endpoint_id, "org_default", "ping", None, None, "pending", now, now, now)
        for _ in range(n)
    ]
    with sqlite3.connect(db, timeout=30) as conn:
        conn.executemany(
            "INSERT INTO webhook_deliveries (id, endpoint_id, org_id, event, job_id, run, status,"
            " attempts, response_code, error, next_at, created_at, updated_at)"
            " VALUES (?,?,?,?,?,?,?,0,0,'',?,?,?)",
            rows,
        )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--rate", type=float, default=10.0, help="jobs/s in the delay phase")
    parser.add_argument("--burst", type=int, default=None)
    args = parser.parse_args(argv)
    n = args.jobs or (60 if args.quick else 300)
    m = args.burst or (1000 if args.quick else 5000)
    result: dict[str, Any] = {
        "bench": "webhooks",
        "machine": {**common.machine(), "loadavg_before": common.loadavg()},
        "settings": {"jobs": n, "rate": args.rate, "burst": m, "receiver": "trio+h11, 200"},
    }
    receiver = Receiver().start()
    env = {"RUNPLANE_EGRESS_ALLOW": "127.0.0.1", "RUNPLANE_ADMIN_TOKEN": ADMIN}
    headers = {"Authorization": f"Bearer {ADMIN}"}
    try:
        with (
            common.server(local_agent=True, env=env) as srv,
            httpx.Client(base_url=srv.url, timeout=30) as client,
        ):
            made = client.post(
                "/v1/webhooks",
                json={"url": f"http://127.0.0.1:{receiver.port}/hook", "org_id": "org_default"},
                headers=headers,
            )
            made.raise_for_status()
            endpoint_id = made.json()["id"]
            # firing delay: paced real jobs
            for _ in range(n):
                client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})
                time.sleep(1 / args.rate)
            _wait(lambda: len(receiver.arrivals) >= n, 60)
            delays = sorted(
                (at - fin) * 1000
                for at, body in receiver.arrivals
                if (fin := _finished_s(body)) is not None
            )
            result["firing_delay_ms"] = {
                "p50": round(statistics.median(delays), 1),
                "p99": round(delays[min(len(delays) - 1, int(len(delays) * 0.99))], 1),
                "max": round(delays[-1], 1),
                "n": len(delays),
            }
            # throughput: a burst of pending deliveries, read at once
            before = len(receiver.arrivals)
            seed(srv.db_path(), endpoint_id, m)
            client.post(f"/v1/webhooks/{endpoint_id}/test", headers=headers).raise_for_status()
            complete = _wait(lambda: len(receiver.arrivals) >= before + m + 1, 120)
            burst = [at for at, _ in receiver.arrivals[before:]]
            span = burst[-1] - burst[0] if len(burst) > 1 else 0.0
            result["deliveries"] = {
                "received": len(burst),
                "complete": complete,
                "per_s": round((len(burst) - 1) / span, 1) if span else None,
                "seconds": round(span, 2),
            }
    finally:
        receiver.stop()
    result["machine"]["loadavg_after"] = common.loadavg()
    return result


if __name__ == "__main__":
    common.emit(main())
