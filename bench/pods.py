"""Realtime-stream pods for the stream benchmarks: a real ``runplane agent`` process next
to the server, and jobs whose process publishes a stream (``PRODUCER``) or echoes teleop
frames onto one (``ECHO``), plus the HTTP calls around them (stdlib only)."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from bench import common

#: Writes ``{"n": i, "t": <monotonic>}`` to stream ``bench`` at RATE chunks/s for SECONDS,
#: then ``{"end": true}`` (the subscribers' cue), then exits.
PRODUCER = """
import json, os, time
out = open(os.path.join(os.environ["RUNPLANE_STREAMS_DIR"], "bench"), "a", buffering=1)
out.write(json.dumps({"ready": True}) + "\\n")
time.sleep(float(os.environ["START_DELAY"]))
rate, seconds = float(os.environ["RATE"]), float(os.environ["SECONDS"])
t0 = time.monotonic()
for i in range(int(rate * seconds)):
    wait = t0 + i / rate - time.monotonic()
    if wait > 0:
        time.sleep(wait)
    out.write(json.dumps({"n": i, "t": time.monotonic()}) + "\\n")
out.write(json.dumps({"end": True}) + "\\n")
time.sleep(1)
"""

#: Echoes every teleop frame of stream ``bench`` back onto it (polled each millisecond);
#: a frame {"stop": true} ends it.
ECHO = """
import json, os, sys, time
d = os.environ["RUNPLANE_STREAMS_DIR"]
out = open(os.path.join(d, "bench"), "a", buffering=1)
out.write(json.dumps({"ready": True}) + "\\n")
path, pos, buf = os.path.join(d, "bench.teleop"), 0, b""
while True:
    try:
        with open(path, "rb") as f:
            f.seek(pos)
            data = f.read()
    except FileNotFoundError:
        data = b""
    pos += len(data)
    buf += data
    while b"\\n" in buf:
        line, buf = buf.split(b"\\n", 1)
        frame = json.loads(line)["frame"]
        out.write(json.dumps({"echo": frame}) + "\\n")
        if frame.get("stop"):
            sys.exit(0)
    time.sleep(0.001)
"""


def request(port: int, method: str, path: str, body: Any = None) -> Any:
    req = urllib.request.Request(
        f"http://{common.LOOPBACK}:{port}{path}",
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method=method,
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def start_agent(srv: common.Server) -> subprocess.Popen[bytes]:
    """A ``runplane agent`` process connected to ``srv`` (best effort: no limits asked)."""
    data = Path(tempfile.mkdtemp(prefix="runplane-bench-agent-"))
    data.chmod(0o711)  # a root agent's job user must reach the work dir inside
    env = {k: v for k, v in srv.env.items() if not k.startswith("RUNPLANE_")}
    return subprocess.Popen(
        [common.PYTHON, "-m", "runplane", "agent", "--server", srv.url, "--data-dir",
         str(data / "agent"), "--name", "bench-pod", "--work-dir", str(data / "work")],
        cwd=common.REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip


def run_pod(port: int, script: str, env: dict[str, str], limit: float = 60.0) -> str:
    """Submit the pod job and wait until it runs and its stream ``bench`` has a chunk."""
    job = request(
        port, "POST", "/v1/jobs",
        {"stack": "shell", "command": ["python3", "-c", script], "env": env},
    )["job_id"]  # fmt: skip
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        views = request(port, "GET", f"/v1/jobs/{job}/streams")
        if any(v["name"] == "bench" and v["count"] > 0 for v in views):
            return str(job)
        time.sleep(0.05)
    raise RuntimeError(f"pod {job} did not publish within {limit} s")


def subscribe(port: int, job: str) -> dict[str, Any]:
    return dict(request(port, "POST", f"/v1/jobs/{job}/streams/bench/subscribe"))
