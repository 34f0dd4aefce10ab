"""The processes of ``bench chaos``: a private PostgreSQL cluster (``scripts/pgtest``) that
can be restarted, HA replicas (``bench.ha_cluster``), real agents, and the supervisor that
starts again whatever exits by itself, as systemd's ``Restart=always`` would.
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import PYTHON, REPO
from bench.ha_cluster import Cluster, Replica

PGTEST = REPO / "scripts" / "pgtest"


class Postgres:
    """A ``scripts/pgtest`` cluster in ``directory``: started, restarted, stopped."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.url = ""

    def start(self) -> str:
        out = subprocess.run(
            [str(PGTEST), "start", str(self.directory)],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        lines = out.stdout.strip().splitlines()
        if out.returncode != 0 or not lines or not lines[-1].startswith("postgresql://"):
            raise RuntimeError(f"scripts/pgtest start failed: {out.stderr.strip()[-500:]}")
        self.url = lines[-1]
        return self.url

    def stop(self) -> None:
        subprocess.run(
            [str(PGTEST), "stop", str(self.directory)],
            capture_output=True,
            timeout=120,
            check=False,
        )

    def restart(self, mode: str) -> float:
        """``pg_ctl restart -m mode`` (fast, immediate); the seconds it took."""
        bindir = _bindir()
        argv = [f"{bindir}/pg_ctl", "-D", str(self.directory / "data"), "-m", mode, "-w"]
        argv += ["-t", "120", "-l", str(self.directory / "postgres.log"), "restart"]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        started = time.monotonic()
        out = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
        if out.returncode != 0:
            raise RuntimeError(f"pg_ctl restart -m {mode} failed: {out.stderr.strip()[-500:]}")
        return time.monotonic() - started


def _bindir() -> str:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    if found:
        return str(Path(found[-1]).parent)
    return "/usr/bin"  # pg_ctl on PATH


@dataclass
class Agent:
    index: int
    servers: str
    root: Path
    slots: int
    proc: subprocess.Popen[bytes] | None = None
    exits: list[int] = field(default_factory=list)

    @property
    def log_path(self) -> Path:
        return self.root / f"agent-{self.index}.log"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            self.exits.append(self.proc.returncode)
        work = self.root / f"work-{self.index}"
        work.mkdir(parents=True, exist_ok=True)
        work.chmod(0o711)  # a root agent's job uids must reach their workdirs
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
        argv = [PYTHON, "-m", "runplane", "agent", "--server", self.servers]
        argv += [
            "--data-dir",
            str(self.root / f"agent-{self.index}"),
            "--name",
            f"chaos-{self.index}",
        ]
        argv += ["--max-concurrency", str(self.slots), "--work-dir", str(work)]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                start_new_session=True,
            )

    def signal(self, sig: int) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)
            if sig == signal.SIGKILL:
                self.proc.wait()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Supervisor:
    """Restarts any replica or agent that is not running, unless a fault holds it down
    (``hold``) for a while; counts the exits it did not cause, by exit code."""

    def __init__(self, cluster: Cluster, agents: list[Agent]) -> None:
        self.cluster = cluster
        self.agents = agents
        self.lock = threading.Lock()
        self.held: dict[int, float] = {}  # id(process owner) -> restart not before
        self.killed: set[int] = set()  # pids we killed on purpose
        self.replica_exits: dict[str, int] = {}
        self.agent_exits: dict[str, int] = {}
        self.restarts = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="supervisor")

    def hold(self, owner: Replica | Agent, seconds: float) -> None:
        with self.lock:
            self.held[id(owner)] = time.monotonic() + seconds
            if owner.proc is not None:
                self.killed.add(owner.proc.pid)

    def _due(self, owner: Replica | Agent) -> bool:
        return self.held.get(id(owner), 0.0) <= time.monotonic()

    def _exited(self, proc: subprocess.Popen[bytes] | None, counts: dict[str, int]) -> None:
        if proc is not None and proc.pid not in self.killed:
            code = str(proc.returncode)
            counts[code] = counts.get(code, 0) + 1

    def check(self) -> None:
        with self.lock:
            for replica in self.cluster.replicas:
                if not replica.alive and self._due(replica):
                    self._exited(replica.proc, self.replica_exits)
                    self.cluster.start(replica)
                    self.restarts += 1
            for agent in self.agents:
                if not agent.alive and self._due(agent):
                    self._exited(agent.proc, self.agent_exits)
                    agent.start()
                    self.restarts += 1

    def _run(self) -> None:
        while not self.stop.wait(0.3):
            self.check()


KINDS = ("agent_kill", "agent_stop", "leader_kill", "pg_fast", "pg_immediate")


def schedule(seed: int, seconds: float, every: float) -> list[tuple[float, str]]:
    """Fault times (seconds from the start) and kinds: intervals drawn around ``every``,
    kinds drawn from a shuffled bag of every kind (so each comes once before any twice).
    The last fault comes at least ``every`` before the end."""
    import random

    rng = random.Random(seed)
    out: list[tuple[float, str]] = []
    bag: list[str] = []
    at = rng.uniform(0.3, 0.7) * every
    while at < seconds - every * 0.5:
        if not bag:
            bag = list(KINDS)
            rng.shuffle(bag)
        out.append((round(at, 2), bag.pop()))
        at += rng.uniform(0.6, 1.4) * every
    return out


class Faults:
    """Injects the scheduled faults in a thread; ``counts`` by kind, ``events`` in order."""

    def __init__(
        self,
        seed: int,
        plan: list[tuple[float, str]],
        supervisor: Supervisor,
        pg: Postgres,
        *,
        stop_sec: float = 20.0,
    ) -> None:
        import random

        self.rng = random.Random(seed + 1)
        self.plan = plan
        self.supervisor = supervisor
        self.pg = pg
        self.stop_sec = stop_sec
        self.counts: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.skipped: dict[str, int] = {}
        self.events: list[dict[str, object]] = []
        #: (agent index, from, to) in unix seconds: while it was killed or paused
        self.windows: list[tuple[int, float, float]] = []
        self.stop = threading.Event()
        self.paused: list[threading.Timer] = []
        self.thread = threading.Thread(target=self._run, daemon=True, name="faults")

    def _run(self) -> None:
        started = time.monotonic()
        for at, kind in self.plan:
            if self.stop.wait(max(0.0, started + at - time.monotonic())):
                return
            try:
                detail = self.inject(kind)
            except Exception as exc:  # a failed fault is a figure, not a crash
                detail = f"failed: {exc}"
            if detail.startswith("skipped"):
                self.skipped[kind] = self.skipped.get(kind, 0) + 1
            else:
                self.counts[kind] += 1
            self.events.append(
                {"t": round(time.monotonic() - started, 1), "kind": kind, "detail": detail}
            )

    def inject(self, kind: str) -> str:
        sup = self.supervisor
        if kind in ("agent_kill", "agent_stop"):
            agent = self.rng.choice([a for a in sup.agents if a.alive] or sup.agents)
            if kind == "agent_kill":
                down = self.rng.uniform(2.0, 5.0)
                sup.hold(agent, down)
                agent.signal(signal.SIGKILL)
                self.windows.append((agent.index, time.time(), time.time() + down + 1.0))
                return f"agent {agent.index} killed, restarted after {down:.1f} s"
            agent.signal(signal.SIGSTOP)
            self.windows.append((agent.index, time.time(), time.time() + self.stop_sec))
            timer = threading.Timer(self.stop_sec, agent.signal, (signal.SIGCONT,))
            timer.start()
            self.paused.append(timer)
            return f"agent {agent.index} stopped for {self.stop_sec:.0f} s"
        if kind == "leader_kill":
            leader = sup.cluster.leader()
            if leader is None:
                return "skipped: no leader"
            down = self.rng.uniform(2.0, 5.0)
            sup.hold(leader, down)
            sup.cluster.kill(leader)
            return f"leader {leader.index} killed, restarted after {down:.1f} s"
        mode = "fast" if kind == "pg_fast" else "immediate"
        took = self.pg.restart(mode)
        return f"pg_ctl restart -m {mode} took {took:.1f} s"

    def finish(self) -> None:
        """Stop injecting; resume every paused agent now."""
        self.stop.set()
        self.thread.join(200)
        for timer in self.paused:
            if timer.is_alive():
                timer.cancel()
                timer.function(*timer.args)


class RssSampler:
    """Samples each replica process's RSS every ``every`` seconds, per process lineage
    (replica slot, pid); ``growth_mb_per_hour`` fits a line to each."""

    def __init__(self, cluster: Cluster, every: float) -> None:
        self.cluster = cluster
        self.every = every
        self.samples: dict[tuple[int, int], list[tuple[float, float]]] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="rss")

    def _run(self) -> None:
        from bench.common import proc_stat

        while not self.stop.wait(self.every):
            for replica in self.cluster.replicas:
                proc = replica.proc
                if proc is None or proc.poll() is not None:
                    continue
                with contextlib.suppress(OSError, ValueError, IndexError):
                    mb = proc_stat(proc.pid).rss_kb / 1024
                    key = (replica.index, proc.pid)
                    self.samples.setdefault(key, []).append((time.monotonic(), mb))

    def figures(self, warmup: float = 30.0, least: float = 60.0) -> dict[str, object]:
        """Per lineage that lived ``least`` seconds past its ``warmup``: first and last MB
        and the least-squares slope in MB/hour. ``rss_growth_mb_per_hour``: the sum over
        replica slots of the slope of each slot's longest-lived lineage."""
        lineages = []
        best: dict[int, tuple[float, float]] = {}  # slot -> (span, slope)
        for (slot, pid), points in self.samples.items():
            start = points[0][0] + warmup
            kept = [(t, mb) for t, mb in points if t >= start]
            if len(kept) < 3 or kept[-1][0] - kept[0][0] < least:
                continue
            span = kept[-1][0] - kept[0][0]
            slope = _slope(kept) * 3600
            lineages.append(
                {
                    "replica": slot,
                    "pid": pid,
                    "span_s": round(span),
                    "first_mb": round(kept[0][1], 1),
                    "last_mb": round(kept[-1][1], 1),
                    "mb_per_hour": round(slope, 1),
                }
            )
            if span > best.get(slot, (0.0, 0.0))[0]:
                best[slot] = (span, slope)
        peak = max((mb for points in self.samples.values() for _, mb in points), default=None)
        return {
            "rss_growth_mb_per_hour": round(sum(s for _, s in best.values()), 1) if best else None,
            "rss_peak_mb": round(peak, 1) if peak is not None else None,
            "rss_lineages": lineages,
        }


def _slope(points: list[tuple[float, float]]) -> float:
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    den = sum((t - mean_t) ** 2 for t, _ in points)
    return sum((t - mean_t) * (v - mean_v) for t, v in points) / den if den else 0.0
