"""Artifact upload and download throughput through a real ``runplane serve`` process.

    python -m bench.artifacts [--size-mb 256] [--runs 3] [--parallel 4]

Starts ``python -m runplane serve --port 0`` on loopback (fresh data dir, memory database,
no local agent) and moves one file of ``--size-mb`` with the agent's own transfer client
(``runplane.artifacts.client``: ``http.client`` in a worker thread, 1 MiB chunks, SHA-256
on the way):

- ``upload``: PUT /v1/artifacts/<key> from a file in the page cache; the server streams it
  to a temp file, fsyncs it and renames it into place before answering 201;
- ``download``: GET into a new file (what an agent does for an archive workspace);
- ``download_discard``: GET with the bytes dropped (the serving side alone);
- ``parallel``: ``--parallel`` uploads at once, then as many downloads (aggregate MB/s);
- ``zip``: GET /v1/artifacts-zip of 32 objects of size/32 each (stored, not deflated).

MB = 10^6 bytes. Medians over ``--runs``. The server's CPU seconds per GB moved and its
peak RSS (VmHWM) are read from /proc. Prints ONE JSON object.
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runplane.artifacts.client import CHUNK_BYTES, download_sync, upload_sync

REPO = Path(__file__).resolve().parent.parent


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _start_server(tmp: Path, max_upload_mb: int) -> tuple[subprocess.Popen[bytes], str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
    env.update(
        {
            "RUNPLANE_DATA_DIR": str(tmp / "data"),
            "RUNPLANE_DATABASE_URL": "memory",
            "RUNPLANE_LOCAL_AGENT": "0",
            "RUNPLANE_MAX_UPLOAD_MB": str(max_upload_mb),
        }
    )
    log = tmp / "server.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "runplane", "serve", "--port", "0", "--log-level", "INFO"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
        for line in log.read_text(errors="replace").splitlines():
            if '"listening"' in line:
                return proc, str(json.loads(line)["urls"][0])
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("server did not start")


def _discard_get(url: str) -> int:
    host_port = url.split("/")[2]
    host, port = host_port.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("GET", "/" + url.split("/", 3)[3])
        response = conn.getresponse()
        assert response.status == 200, response.status
        total = 0
        while chunk := response.read1(CHUNK_BYTES):
            total += len(chunk)
        return total
    finally:
        conn.close()


def _timed(fn: Callable[[], Any]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def _parallel(fns: list[Callable[[], Any]]) -> float:
    errors: list[BaseException] = []

    def run(fn: Callable[[], Any]) -> None:
        try:
            fn()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(fn,)) for fn in fns]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=256)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--parallel", type=int, default=4)
    args = parser.parse_args(argv)
    size = args.size_mb * 1024 * 1024
    mb = size / 1e6
    tmp = Path(tempfile.mkdtemp(prefix="runplane-bench-artifacts-"))
    proc, url = _start_server(tmp, max_upload_mb=args.size_mb + 16)
    try:
        source = tmp / "source.bin"
        digest = hashlib.sha256()
        with source.open("wb") as fh:
            block = os.urandom(CHUNK_BYTES)
            for i in range(size // CHUNK_BYTES):
                chunk = hashlib.sha256(i.to_bytes(8, "big")).digest() + block[32:]
                digest.update(chunk)
                fh.write(chunk)
        key_url = f"{url}/v1/artifacts/bench/blob.bin"
        upload_sync(key_url, source)  # warm up
        pid = proc.pid
        cpu0 = _cpu_seconds(pid)
        up = [_timed(lambda: upload_sync(key_url, source)) for _ in range(args.runs)]
        cpu_up = _cpu_seconds(pid) - cpu0
        downs: list[float] = []
        for i in range(args.runs):
            dest = tmp / f"down-{i}.bin"
            downs.append(_timed(lambda dest=dest: download_sync(key_url, dest)))  # type: ignore[misc]
            if i == 0:
                assert hashlib.sha256(dest.read_bytes()).hexdigest() == digest.hexdigest()
            dest.unlink()
        cpu0 = _cpu_seconds(pid)
        discard = [_timed(lambda: _discard_get(key_url)) for _ in range(args.runs)]
        cpu_down = _cpu_seconds(pid) - cpu0
        n = args.parallel
        par_up = _parallel(
            [
                (lambda i=i: upload_sync(f"{url}/v1/artifacts/bench/p{i}.bin", source))
                for i in range(n)
            ]
        )
        par_down = _parallel(
            [(lambda i=i: _discard_get(f"{url}/v1/artifacts/bench/p{i}.bin")) for i in range(n)]
        )
        part = tmp / "part.bin"
        with source.open("rb") as src, part.open("wb") as dst:
            dst.write(src.read(size // 32))
        for i in range(32):
            upload_sync(f"{url}/v1/artifacts/bench-zip/out/f{i:02d}.bin", part)
        zips = [_timed(lambda: _discard_get(f"{url}/v1/artifacts-zip/bench-zip")) for _ in range(2)]
        result = {
            "scenario": "artifacts",
            "size_mb": round(mb, 1),
            "runs": args.runs,
            "upload_mb_s": round(mb / statistics.median(up), 1),
            "download_mb_s": round(mb / statistics.median(downs), 1),
            "download_discard_mb_s": round(mb / statistics.median(discard), 1),
            f"parallel{n}_upload_mb_s": round(n * mb / par_up, 1),
            f"parallel{n}_download_mb_s": round(n * mb / par_down, 1),
            "zip_mb_s": round(mb / statistics.median(zips), 1),
            "server_cpu_s_per_gb_upload": round(cpu_up / (args.runs * mb / 1000), 2),
            "server_cpu_s_per_gb_download": round(cpu_down / (args.runs * mb / 1000), 2),
            "server_rss_peak_mb": round(_status_kb(pid, "VmHWM") / 1024, 1),
            "machine": {
                "cpus": os.cpu_count(),
                "python": platform.python_version(),
                "kernel": platform.release(),
            },
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
