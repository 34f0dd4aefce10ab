"""Replicas of ``runplane serve`` under ``RUNPLANE_HA=1`` on loopback, for ``bench ha``
and the failover tests (tests/e2e/test_ha_e2e.py): start them on fixed ports (a replica
started again keeps its address, as under a process supervisor), find the leader, kill or
pause it, start it again.

Every replica shares one PostgreSQL database, one data dir (artifacts) and one secret key,
as docs/operations.md "High availability" asks of a deploy.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import LOOPBACK, PYTHON, REPO


def free_port() -> int:
    """A free port BELOW the kernel's ephemeral range. A replica is started again on its
    port after a kill; a port from the ephemeral range might meanwhile be taken as the
    source port of some outgoing connection, and the restart would fail to bind."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.Random()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


@dataclass
class Replica:
    index: int
    port: int
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    #: exit codes of its earlier processes (3: it could not step down in its process)
    exits: list[int] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def status(self, timeout: float = 1.0) -> dict[str, Any] | None:
        """Its ``GET /v1/ha``, or None when it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.url}/v1/ha", timeout=timeout) as answer:
                return dict(json.load(answer))
        except (OSError, ValueError, urllib.error.URLError):
            return None


class Cluster:
    def __init__(
        self,
        database_url: str,
        workdir: Path,
        *,
        replicas: int = 3,
        lease_sec: float = 3.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.database_url = database_url
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.lease_sec = lease_sec
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
        self.env.update(
            {
                "RUNPLANE_HA": "1",
                "RUNPLANE_LOCAL_AGENT": "0",
                "RUNPLANE_DATABASE_URL": database_url,
                "RUNPLANE_DATA_DIR": str(self.data_dir),
                "RUNPLANE_SECRET_KEY": secrets.token_hex(32),
                "RUNPLANE_HA_LEASE_SEC": str(lease_sec),
                "RUNPLANE_MAX_CONCURRENT_ORG": "0",
                "PYTHONUNBUFFERED": "1",
            }
        )
        self.env.update(env or {})
        self.replicas = [
            Replica(i, free_port(), workdir / f"replica-{i}.log") for i in range(replicas)
        ]

    @property
    def urls(self) -> list[str]:
        return [r.url for r in self.replicas]

    def start(self, replica: Replica) -> None:
        if replica.proc is not None:
            code = replica.proc.poll()
            assert code is not None, "still running"
            replica.exits.append(code)
        with replica.log_path.open("ab") as log:
            replica.proc = subprocess.Popen(
                [
                    PYTHON,
                    "-m",
                    "runplane",
                    "serve",
                    "--host",
                    LOOPBACK,
                    "--port",
                    str(replica.port),
                ],
                cwd=REPO,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

    def start_all(self, timeout: float = 60.0) -> Replica:
        for replica in self.replicas:
            self.start(replica)
        return self.wait_leader(timeout=timeout)

    def leader(self) -> Replica | None:
        """The replica that says it leads, once every replica that answers agrees on its
        epoch."""
        found: Replica | None = None
        epochs = set()
        for replica in self.replicas:
            if not replica.alive:
                continue
            status = replica.status()
            if status is None:
                continue  # paused, or not serving yet: it has no say
            if status.get("leader"):
                epochs.add(status["leader"]["epoch"])
            if status["role"] == "leader":
                found = replica
        return found if found is not None and len(epochs) == 1 else None

    def wait_leader(self, *, other_than: Replica | None = None, timeout: float = 30.0) -> Replica:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            leader = self.leader()
            if leader is not None and leader is not other_than:
                return leader
            time.sleep(0.02)
        raise RuntimeError(f"no leader after {timeout} s: {self.tails()}")

    def kill(self, replica: Replica, sig: int = signal.SIGKILL) -> None:
        assert replica.proc is not None
        replica.proc.send_signal(sig)
        if sig == signal.SIGKILL:
            replica.proc.wait()

    def stop_all(self) -> None:
        for replica in self.replicas:
            proc = replica.proc
            if proc is None or proc.poll() is not None:
                continue
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for replica in self.replicas:
            proc = replica.proc
            if proc is None:
                continue
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def tails(self, lines: int = 15) -> str:
        out = []
        for replica in self.replicas:
            with contextlib.suppress(OSError):
                text = replica.log_path.read_text().splitlines()[-lines:]
                out.append(f"--- replica {replica.index} ({replica.url})\n" + "\n".join(text))
        return "\n".join(out)

    def log_records(self, replica: Replica) -> list[dict[str, Any]]:
        records = []
        with replica.log_path.open() as fh:
            for line in fh:
                with contextlib.suppress(ValueError):
                    records.append(json.loads(line))
        return records
