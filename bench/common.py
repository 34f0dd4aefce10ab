"""Shared pieces of the benchmark scenarios: the machine, a server subprocess, helpers.

Every scenario starts its own server (``python -m runplane serve --port 0``) on loopback
with a fresh temporary ``RUNPLANE_DATA_DIR``, drives it from separate processes (the load
generators in this package), and prints one JSON object.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
LOOPBACK = "127.0.0.1"
_PACKAGES = (
    "trio",
    "hypercorn",
    "quart",
    "quart-trio",
    "h11",
    "wsproto",
    "trio-websocket",
    "pydantic",
    "psycopg",
)


def git_commit() -> str:
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("+dirty" if dirty else "")


def machine() -> dict[str, Any]:
    """Cores, CPU model, Python and library versions: what a figure was measured on."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    cpu_model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    return {
        "cores": os.cpu_count(),
        "cpu": cpu_model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "sqlite": sqlite3.sqlite_version,
        "versions": versions,
        "commit": git_commit(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def pct(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (0..1) of values by nearest rank, or None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def latency_summary(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """p50/p90/p99/max in milliseconds of a list of durations in seconds."""
    if not seconds:
        return {"n": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "max_ms": None}
    ordered = sorted(seconds)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * 1000, 2)

    return {
        "n": len(ordered),
        "p50_ms": at(0.5),
        "p90_ms": at(0.9),
        "p99_ms": at(0.99),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


# -- processes ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcStat:
    rss_kb: int
    cpu_sec: float  # user + system


def proc_stat(pid: int) -> ProcStat:
    """RSS and CPU time (user + system, threads included) of a live process."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
            break
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return ProcStat(rss_kb=rss, cpu_sec=(int(fields[11]) + int(fields[12])) / ticks)


class CpuMeter:
    """CPU share (1.0 = one core) of a process between start() and stop()."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._t0 = 0.0
        self._c0 = 0.0
        self.share: float | None = None

    def start(self) -> CpuMeter:
        self._t0, self._c0 = time.monotonic(), proc_stat(self.pid).cpu_sec
        return self

    def stop(self) -> float:
        wall = time.monotonic() - self._t0
        self.share = round((proc_stat(self.pid).cpu_sec - self._c0) / wall, 3) if wall else 0.0
        return self.share


@dataclass
class Server:
    """A ``runplane serve`` subprocess on loopback with its own data dir."""

    url: str
    host: str
    port: int
    proc: subprocess.Popen[bytes]
    data_dir: Path
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def db_path(self) -> Path:
        return self.data_dir / "runplane.db"

    def log_lines(self) -> Iterator[dict[str, Any]]:
        with self.log_path.open() as fh:
            for line in fh:
                with contextlib.suppress(ValueError):
                    yield json.loads(line)


def _wait_listening(proc: subprocess.Popen[bytes], log_path: Path, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"server exited with {proc.returncode}: {log_path.read_text()[-2000:]}"
            )
        with contextlib.suppress(OSError):
            for line in log_path.read_text().splitlines():
                if '"listening"' in line:
                    return str(json.loads(line)["urls"][0])
        time.sleep(0.05)
    raise RuntimeError(f"server not listening after {timeout} s: {log_path.read_text()[-2000:]}")


def _wait_local_agent(server: Server, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(rec.get("msg") == "node attached" for rec in server.log_lines()):
            return
        time.sleep(0.05)
    raise RuntimeError("the local agent did not attach")


@contextlib.contextmanager
def server(
    *,
    local_agent: bool = False,
    env: dict[str, str] | None = None,
    log_level: str = "INFO",
    keep: bool = False,
) -> Iterator[Server]:
    """Start ``python -m runplane serve --port 0`` with a fresh data dir; stop it after.
    The org concurrency quota is off (``RUNPLANE_MAX_CONCURRENT_ORG=0``) unless ``env``
    sets it."""
    tmp = Path(tempfile.mkdtemp(prefix="runplane-bench-"))
    data_dir = tmp / "data"
    log_path = tmp / "server.log"
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    child_env.update(
        {
            "RUNPLANE_DATA_DIR": str(data_dir),
            "RUNPLANE_LOCAL_AGENT": "1" if local_agent else "0",
            "RUNPLANE_AUTH": "off",
            # throughput scenarios queue thousands of jobs in one org: no concurrency quota
            # (the admission scenario measures the gate itself)
            "RUNPLANE_MAX_CONCURRENT_ORG": "0",
            "PYTHONUNBUFFERED": "1",
        }
    )
    child_env.update(env or {})
    with log_path.open("wb") as log_fh:
        proc = subprocess.Popen(
            [
                PYTHON,
                "-m",
                "runplane",
                "serve",
                "--host",
                LOOPBACK,
                "--port",
                "0",
                "--log-level",
                log_level,
            ],
            cwd=REPO,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log_fh,
        )
    try:
        url = _wait_listening(proc, log_path, 30.0)
        port = int(url.rsplit(":", 1)[1].rstrip("/"))
        srv = Server(url, LOOPBACK, port, proc, data_dir, log_path, child_env)
        if local_agent:
            _wait_local_agent(srv, 30.0)
        yield srv
    finally:
        stop(proc)
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


def stop(proc: subprocess.Popen[Any], timeout: float = 20.0) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_json(argv: Sequence[str], *, timeout: float, env: dict[str, str] | None = None) -> Any:
    """Run ``python -m <argv...>`` in a child process; return the JSON its stdout ends with."""
    out = subprocess.run(
        [PYTHON, "-m", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def spawn(argv: Sequence[str], *, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``python -m <argv...>`` with piped stdout (JSON lines) for the caller to read;
    stderr goes to an unnamed temporary file (a full pipe would block the child)."""
    err = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 - lives as long as the child
    proc = subprocess.Popen(
        [PYTHON, "-m", *argv],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=env,
    )
    _STDERR[proc.pid] = err
    return proc


_STDERR: dict[int, Any] = {}


def _stderr_tail(proc: subprocess.Popen[str]) -> str:
    err = _STDERR.get(proc.pid)
    if err is None:
        return ""
    try:
        err.seek(0)
        return str(err.read())[-3000:]
    except (OSError, ValueError):
        return ""


def read_json_line(proc: subprocess.Popen[str], timeout: float) -> Any:
    """The next JSON line a spawned child prints (e.g. ``{"ready": ...}``)."""
    import selectors

    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise TimeoutError(f"no output from child within {timeout} s")
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"child ended ({proc.wait()}): {_stderr_tail(proc)}")
            line = line.strip()
            if line.startswith("{"):
                return json.loads(line)
    finally:
        sel.close()


def emit(result: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def finish(result: dict[str, Any], started: float) -> dict[str, Any]:
    """A scenario's last step: stamp ``loadavg_after`` and ``elapsed_s`` (seconds since
    ``started``, a ``time.monotonic()``), print the JSON line, return the result."""
    result["loadavg_after"] = loadavg()
    result["elapsed_s"] = round(time.monotonic() - started, 1)
    emit(result)
    return result


def http_load(
    pid: int,
    port: int,
    *,
    path: str = "/healthz",
    method: str = "GET",
    body: str = "",
    connections: int = 50,
    seconds: float = 5.0,
    warmup: float = 1.0,
    count: int | None = None,
    ids: bool = False,
    rate: float | None = None,
) -> dict[str, Any]:
    """Drive ``bench.httpload`` (its own process) at a server; add the server's CPU share."""
    argv = [
        "bench.httpload",
        "--port",
        str(port),
        "--path",
        path,
        "--method",
        method,
        "--connections",
        str(connections),
        "--seconds",
        str(seconds),
        "--warmup",
        str(warmup),
    ]
    if body:
        argv += ["--body", body]
    if count is not None:
        argv += ["--count", str(count)]
    if ids:
        argv.append("--ids")
    if rate:
        argv += ["--rate", str(rate)]
    meter = CpuMeter(pid).start()
    result: dict[str, Any] = run_json(argv, timeout=seconds + warmup + 60)
    result["server_cpu_share"] = meter.stop()
    if result["rps"]:
        result["server_cpu_us_per_request"] = round(
            result["server_cpu_share"] * 1e6 / result["rps"]
        )
    return result


@contextlib.contextmanager
def hello_server(kind: str) -> Iterator[tuple[int, int]]:
    """A ``bench.hello`` server of that kind: yields (port, pid)."""
    proc = spawn(["bench.hello", kind])
    try:
        ready = read_json_line(proc, 30.0)
        yield int(ready["port"]), int(ready["pid"])
    finally:
        stop(proc)


def loadavg() -> list[float]:
    """The 1/5/15-minute load averages: other work on the machine skews every figure."""
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def wait_count(db_path: Any, sql: str, params: Sequence[Any], n: int, limit: float) -> int:
    """Poll the server's SQLite file (read-only) until ``sql`` (a ``count(*)``) reaches
    ``n`` or ``limit`` seconds pass; the last count seen."""
    deadline = time.monotonic() + limit
    done = 0
    while time.monotonic() < deadline:
        try:
            with sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5) as db:
                done = db.execute(sql, tuple(params)).fetchone()[0]
        except sqlite3.Error:
            pass
        if done >= n:
            break
        time.sleep(0.2)
    return done


def lanes_env(lanes: str) -> dict[str, str]:
    """The server env for ``--lean-lanes on|off`` (``RUNPLANE_LEAN_LANES``, docs/lean-lanes.md)."""
    return {"RUNPLANE_LEAN_LANES": "1" if lanes == "on" else "0"}
