"""Prefect's figures for ``bench peers``: flow-run creation and end-to-end runs.

Needs Prefect in its own venv, ``.peers/prefect-venv`` (``scripts/peers-install``;
``PEERS_PREFECT_VENV``: another); this module runs in runplane's venv and drives Prefect's
processes and HTTP API only.

A fresh ``PREFECT_HOME`` (default SQLite database) in a temporary directory; ``prefect
server start`` on a free loopback port (no UI, analytics off, services on), then one
process serving a no-op flow (``flow.serve``: Prefect's local runner, each flow run a
subprocess; its defaults, polling every 10 s).

* creation: raw ``POST /api/deployments/{id}/create_flow_run`` from C threads (one
  keep-alive connection each, opened again when the server closes it) for S seconds, each
  run scheduled in 2099 so the runner leaves it: created/s (2xx per second) and every
  status (under concurrency Prefect's SQLite answers many with 503; its own client would
  retry them);
* end to end: N runs created for now, one after the other; completed runs/s from the first
  create to the last run ended (``POST /api/flow_runs/filter`` polled every 0.5 s).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench import common

#: Prefect's own venv (``scripts/peers-install``); ``PEERS_PREFECT_VENV`` points elsewhere
VENV = Path(os.environ.get("PEERS_PREFECT_VENV") or common.REPO / ".peers" / "prefect-venv")
FLOW = """\
from prefect import flow


@flow(name="peers-noop")
def noop() -> None:
    return None


if __name__ == "__main__":
    noop.serve(name="peers")
"""
FAR = json.dumps(
    {"state": {"type": "SCHEDULED", "state_details": {"scheduled_time": "2099-01-01T00:00:00Z"}}}
)
ENDED = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def missing() -> str | None:
    """Why Prefect cannot be measured here, or None when it can."""
    if not (VENV / "bin" / "prefect").exists():
        return f"{VENV / 'bin' / 'prefect'} not found: run scripts/peers-install"
    return None


def version() -> str:
    out = subprocess.run(
        [str(VENV / "bin" / "python"), "-c", "import prefect; print(prefect.__version__)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return out.stdout.strip()


def api(port: int, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        f"http://{common.LOOPBACK}:{port}/api{path}",
        data=data,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((common.LOOPBACK, 0))
        return int(s.getsockname()[1])


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        return subprocess.Popen(
            argv,
            cwd=log.parent,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=fh,
            start_new_session=True,
        )


def _kill(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _wait(probe: Any, what: str, limit: float, log: Path) -> Any:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
            found = probe()
            if found:
                return found
        time.sleep(0.5)
    raise RuntimeError(f"prefect: {what} not ready after {limit} s: {log.read_text()[-2000:]}")


@contextlib.contextmanager
def prefect() -> Iterator[tuple[int, str]]:
    """A Prefect server and a served no-op flow: (port, deployment id)."""
    tmp = Path(tempfile.mkdtemp(prefix="runplane-peers-prefect-"))
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "RUNPLANE_"))}
    env.pop("PYTHONPATH", None)
    env.update(
        {
            "PREFECT_HOME": str(tmp / "home"),
            "PREFECT_API_URL": f"http://{common.LOOPBACK}:{port}/api",
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_SERVER_UI_ENABLED": "false",
        }
    )
    (tmp / "flow.py").write_text(FLOW)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        bin_ = VENV / "bin"
        server_log, serve_log = tmp / "server.log", tmp / "serve.log"
        procs.append(
            _spawn(
                [
                    str(bin_ / "prefect"),
                    "server",
                    "start",
                    "--host",
                    common.LOOPBACK,
                    "--port",
                    str(port),
                    "--no-ui",
                    "--analytics-off",
                ],
                env,
                server_log,
            )
        )
        _wait(lambda: api(port, "GET", "/health", timeout=5), "server", 180, server_log)
        procs.append(_spawn([str(bin_ / "python"), str(tmp / "flow.py")], env, serve_log))
        dep = _wait(
            lambda: api(port, "GET", "/deployments/name/peers-noop/peers", timeout=5),
            "deployment",
            180,
            serve_log,
        )
        yield port, str(dep["id"])
    finally:
        for proc in reversed(procs):
            _kill(proc)
        shutil.rmtree(tmp, ignore_errors=True)


def _post_loop(port: int, path: str, stop_at: float, out: dict[str, Any]) -> None:
    """POST ``FAR`` back to back on one keep-alive connection until ``stop_at``; a
    connection the server closes (it does after a 503) is opened again."""
    conn: http.client.HTTPConnection | None = None
    while time.monotonic() < stop_at:
        sent = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection(common.LOOPBACK, port, timeout=30)
            conn.request("POST", path, FAR, {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            key = str(resp.status)
            if resp.status < 300:
                out["latencies"].append(time.monotonic() - sent)  # list.append: atomic
            if resp.will_close:
                conn.close()
                conn = None
        except (OSError, http.client.HTTPException) as exc:
            key = type(exc).__name__
            if conn is not None:
                conn.close()
            conn = None
        with out["lock"]:
            out["statuses"][key] = out["statuses"].get(key, 0) + 1
    if conn is not None:
        conn.close()


def creation(port: int, dep: str, seconds: float, connections: int) -> dict[str, Any]:
    """Raw ``create_flow_run`` requests from ``connections`` threads for ``seconds``."""
    out: dict[str, Any] = {"statuses": {}, "latencies": [], "lock": threading.Lock()}
    path = f"/api/deployments/{dep}/create_flow_run"
    t0 = time.monotonic()
    threads = [
        threading.Thread(target=_post_loop, args=(port, path, t0 + seconds, out), daemon=True)
        for _ in range(connections)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - t0
    created = sum(v for k, v in out["statuses"].items() if k.startswith("2"))
    tried = sum(out["statuses"].values())
    lat = common.latency_summary(out["latencies"])
    return {
        "created": created,
        "requests": tried,
        "statuses": dict(sorted(out["statuses"].items())),
        "failed_share": round(1 - created / tried, 3) if tried else None,
        "seconds": round(elapsed, 2),
        "created_per_s": round(created / elapsed, 1),
        "latency_ms_created": {k: lat[k] for k in ("p50_ms", "p99_ms", "max_ms")},
        "connections": connections,
    }


def api_retrying(port: int, method: str, path: str, body: Any, tries: int = 10) -> Any:
    """``api`` with the retries Prefect's own client makes on a 503 or a dropped
    connection (its SQLite store answers 503 while it is busy)."""
    for attempt in range(tries):
        try:
            return api(port, method, path, body)
        except urllib.error.HTTPError as exc:
            if exc.code != 503 or attempt == tries - 1:
                raise
        except (urllib.error.URLError, OSError):
            if attempt == tries - 1:
                raise
        time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def end_to_end(port: int, dep: str, n: int, limit: float) -> dict[str, Any]:
    """N runs created for now, one after the other; completed/s until all ended."""
    t0 = time.monotonic()
    create = f"/deployments/{dep}/create_flow_run"
    ids = [str(api_retrying(port, "POST", create, {})["id"]) for _ in range(n)]
    deadline = t0 + limit
    states: list[str] = []
    query = {"flow_runs": {"id": {"any_": ids}}, "limit": 200}
    while time.monotonic() < deadline:
        runs = api_retrying(port, "POST", "/flow_runs/filter", query)
        states = [str(r.get("state_type")) for r in runs]
        if len(states) == n and all(s in ENDED for s in states):
            break
        time.sleep(0.5)
    elapsed = time.monotonic() - t0
    done = states.count("COMPLETED")
    ended = sum(s in ENDED for s in states)
    return {
        "runs": n,
        "completed": done,
        "ended": ended,
        "seconds": round(elapsed, 2),
        "completed_per_s": round(done / elapsed, 3) if elapsed else None,
        "timed_out": ended < n,
    }


def measure(*, seconds: float, connections: int, runs: int, limit: float) -> dict[str, Any]:
    with prefect() as (port, dep):
        made = creation(port, dep, seconds, connections)
        e2e = end_to_end(port, dep, runs, limit)
    return {"version": version(), "creation": made, "end_to_end": e2e}
