"""Machine facts a node agent reports in its ``hello``: cores, RAM, disk, GPUs, arch, dlperf.

Everything here is blocking (``/proc`` reads, ``nvidia-smi``, a ~100 ms benchmark); the
agent calls :func:`collect_facts` in a worker thread. Every probe tolerates failure: a
missing or broken tool means "not there", never an error.

``dlperf`` is a measured throughput score (see :func:`measure_unit_rate`)::

    dlperf = cpu_cores * units_per_second_on_one_core / 200

A *unit* is SHA-256 over 64 KiB, zlib level 6 over 32 KiB and a 2,000-step pure-Python
integer loop; one core of the 2-core development machine does ~2,000 units/s, so it scores
~20, and a 32-core server with cores 1.5x as fast ~480 (placement's ``dlperf`` scorer gives
0.5 at 50). GPUs are not benchmarked. The score is cached in ``<data_dir>/dlperf.json`` and
measured again only after 24 h or when the core count changed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import platform
import re
import shutil
import socket
import subprocess
import time
import zlib
from collections.abc import Callable
from pathlib import Path

from runplane.agent.protocol import Facts, Gpu

log = logging.getLogger("runplane.agent")

DLPERF_FILE = "dlperf.json"
DLPERF_VERSION = 1  # bump when the unit or the formula changes: old caches are re-measured
DLPERF_MAX_AGE_SEC = 24 * 3600
DLPERF_WINDOW_SEC = 0.1
DLPERF_UNITS_PER_POINT = 200.0

NVIDIA_SMI_QUERY = [
    "nvidia-smi",
    "--query-gpu=index,uuid,name,memory.total,driver_version",
    "--format=csv,noheader,nounits",
]
PROBE_TIMEOUT_SEC = 5.0
DAEMON_PING_TIMEOUT_SEC = 1.0

_ARCH_ALIASES = {
    "amd64": "x86_64",
    "x64": "x86_64",
    "x86-64": "x86_64",
    "aarch64": "arm64",
    "armv8": "arm64",
    "armv8l": "arm64",
    "arm64e": "arm64",
}
_CUDA_RE = re.compile(r"CUDA Version\s*:\s*([0-9]+(?:\.[0-9]+)*)")


# --------------------------------------------------------------------------- simple facts


def normalize_arch(machine: str) -> str:
    """``platform.machine()`` spelled the way nodes are matched: ``x86_64``, ``arm64``, ..."""
    low = machine.strip().lower()
    return _ARCH_ALIASES.get(low, low) or "unknown"


def cpu_cores() -> int:
    """CPUs this process may run on (the affinity mask, so taskset/cgroup cpusets count)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)


def parse_meminfo_gb(meminfo: str) -> int:
    """``MemTotal`` of a ``/proc/meminfo`` text in GiB, rounded to the nearest; 0 if absent."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return round(int(parts[1]) / (1024 * 1024))
    return 0


def ram_gb() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii", errors="replace") as fh:
            return parse_meminfo_gb(fh.read())
    except OSError:
        pass
    with contextlib.suppress(ValueError, OSError, AttributeError):
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        return round(total / 1024**3)
    return 0


def disk_free_gb(path: Path) -> int:
    """Free space (for unprivileged users) of the filesystem holding ``path``, GiB rounded down."""
    probe = path.absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return shutil.disk_usage(probe).free // 1024**3
    except OSError:
        return 0


# --------------------------------------------------------------------------- GPUs


def parse_nvidia_smi(csv_text: str, cuda: str = "") -> list[Gpu]:
    """GPUs from ``nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version``
    CSV output.

    ``memory.total`` is in MiB (``nounits``); ``vram_gb`` is it in GiB, rounded to the
    nearest. Lines that do not parse (``[N/A]``, warnings) are skipped.
    """
    gpus: list[Gpu] = []
    for raw in csv_text.splitlines():
        fields = [f.strip() for f in raw.split(",")]
        if len(fields) < 4 or not fields[0].isdigit() or not fields[2]:
            continue
        try:
            mib = float(fields[3])
        except ValueError:
            continue
        if not math.isfinite(mib) or mib < 0:
            continue
        uuid = fields[1] if fields[1].upper().startswith(("GPU-", "MIG-")) else ""
        gpus.append(
            Gpu(
                model=fields[2],
                vendor="nvidia",
                vram_gb=round(mib / 1024),
                cuda=cuda,
                index=int(fields[0]),
                uuid=uuid,
            )
        )
    return gpus


def parse_cuda_version(nvidia_smi_output: str) -> str:
    """The ``CUDA Version: 12.2`` of ``nvidia-smi``'s banner, or ``""``."""
    match = _CUDA_RE.search(nvidia_smi_output)
    return match.group(1) if match else ""


def _run(argv: list[str], timeout: float = PROBE_TIMEOUT_SEC) -> str | None:
    """stdout of a probe command that exited 0, or ``None`` for any failure."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout,
            check=False,
            text=True,
            errors="replace",
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def detect_gpus() -> list[Gpu]:
    """NVIDIA GPUs via ``nvidia-smi`` when it is on PATH; ``[]`` otherwise or on failure."""
    if shutil.which("nvidia-smi") is None:
        return []
    out = _run(NVIDIA_SMI_QUERY)
    if out is None:
        log.warning("nvidia-smi failed; reporting no GPUs")
        return []
    banner = _run(["nvidia-smi"]) or ""
    return parse_nvidia_smi(out, parse_cuda_version(banner))


# --------------------------------------------------------------------------- capabilities


def _ping_unix_socket(path: str, timeout: float = DAEMON_PING_TIMEOUT_SEC) -> bool:
    """Whether a Docker-API daemon answers ``GET /_ping`` with 200 on the unix socket."""
    if not os.path.exists(path):
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(path)
            sock.sendall(b"GET /_ping HTTP/1.0\r\nHost: localhost\r\n\r\n")
            head = sock.recv(64)
    except OSError:
        return False
    return head.startswith(b"HTTP/") and b" 200" in head.split(b"\r\n", 1)[0]


def _docker_answers() -> bool:
    if shutil.which("docker") is None:
        return False
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        # A remote/TCP daemon: ask the CLI (slower, bounded by the probe timeout).
        return _run(["docker", "version", "--format", "{{.Server.Version}}"]) is not None
    return _ping_unix_socket(host.removeprefix("unix://") or "/var/run/docker.sock")


def _podman_answers() -> bool:
    if shutil.which("podman") is None:
        return False
    runtime_dir = os.environ.get("XDG_RUNTIME_DIR", "")
    sockets = [f"{runtime_dir}/podman/podman.sock"] if runtime_dir else []
    sockets.append("/run/podman/podman.sock")
    if any(_ping_unix_socket(path) for path in sockets):
        return True
    # Podman needs no daemon: a working `podman info` is the answer.
    return _run(["podman", "info", "--format", "{{.Host.Arch}}"]) is not None


def detect_capabilities() -> list[str]:
    """``process`` always; ``git`` when on PATH; ``docker``/``podman`` when they answer."""
    caps = ["process"]
    if shutil.which("git") is not None:
        caps.append("git")
    if _docker_answers():
        caps.append("docker")
    if _podman_answers():
        caps.append("podman")
    return caps


# --------------------------------------------------------------------------- dlperf

_BLOCK = bytes(range(256)) * 256  # 64 KiB
_TEXT = b"runplane dlperf " * 2048  # 32 KiB


def _work_unit() -> int:
    hashlib.sha256(_BLOCK).digest()
    zlib.compress(_BLOCK[:16384] + _TEXT[:16384], 6)
    acc = 0
    for i in range(2000):
        acc = (acc * 31 + i) & 0xFFFFFFFF
    return acc


def measure_unit_rate(window_sec: float = DLPERF_WINDOW_SEC) -> float:
    """Work units per second on one core, measured for about ``window_sec``."""
    _work_unit()  # warm up
    units = 0
    start = time.perf_counter()
    elapsed = 0.0
    while elapsed < window_sec:
        _work_unit()
        units += 1
        elapsed = time.perf_counter() - start
    return units / elapsed


def dlperf_score(cores: int, unit_rate: float) -> float:
    """The formula in the module docstring, rounded to one decimal."""
    return round(max(1, cores) * unit_rate / DLPERF_UNITS_PER_POINT, 1)


def dlperf(
    data_dir: Path,
    cores: int,
    *,
    now: float | None = None,
    measure: Callable[[], float] = measure_unit_rate,
) -> float:
    """The node's dlperf, from the cache in ``data_dir`` when fresh, else measured (and cached)."""
    now = time.time() if now is None else now
    path = data_dir / DLPERF_FILE
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        age = now - float(cached["measured_at"])
        if (
            cached.get("version") == DLPERF_VERSION
            and cached.get("cores") == cores
            and 0 <= age < DLPERF_MAX_AGE_SEC
        ):
            return float(cached["score"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    rate = measure()
    score = dlperf_score(cores, rate)
    record = {
        "version": DLPERF_VERSION,
        "score": score,
        "cores": cores,
        "unit_rate": round(rate, 1),
        "measured_at": now,
        "formula": f"cores * unit_rate / {DLPERF_UNITS_PER_POINT:g}",
    }
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(f".{DLPERF_FILE}.tmp")
        tmp.write_text(json.dumps(record) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        log.warning("cannot cache dlperf", extra={"path": str(path), "error": str(exc)})
    log.info("measured dlperf", extra={"dlperf": score, "unit_rate": round(rate, 1)})
    return score


# --------------------------------------------------------------------------- all of it


def collect_facts(
    data_dir: Path, name: str | None = None, max_concurrency: int | None = None
) -> Facts:
    """Everything the agent reports about its machine (blocking: call it in a thread)."""
    cores = cpu_cores()
    return Facts(
        name=name or socket.gethostname() or "node",
        cpu_cores=cores,
        ram_gb=ram_gb(),
        disk_gb=disk_free_gb(data_dir),
        gpus=detect_gpus(),
        arch=normalize_arch(platform.machine()),
        os=platform.system().lower() or "unknown",
        capabilities=detect_capabilities(),
        max_concurrency=max_concurrency if max_concurrency and max_concurrency > 0 else cores,
        dlperf=dlperf(data_dir, cores),
        executors=["process"],
    )
