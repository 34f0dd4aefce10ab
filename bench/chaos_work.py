"""The steady work of ``bench chaos``: jobs at a steady rate (some sleeping, some with a
retry policy that fail their first try, some printing lines that an SSE follower
records), pipelines, and a session whose pod echoes teleop frames onto its stream.

Every job's command appends ``<job id> <attempt> start|done|failed <unix s> <workdir>`` to
the ledger (a file outside its workdir, ``>>``: O_APPEND) when it starts and ends; the
attempt is its workdir's name (``<work root>/<job id>/<attempt>``, docs/agent.md), the
work root names the agent (``work-<i>``).
Everything goes through ``Failover``: a refusal (429/5xx) or a cut connection is retried
on the next replica, a submit with the same Idempotency-Key.
"""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

TERMINAL = ("succeeded", "failed", "timeout", "cancelled")
RETRIED = (429, 500, 502, 503, 504)


class Failover:
    """Requests over the replicas in turn, as a client behind a load balancer."""

    def __init__(self, urls: list[str], timeout: float = 10.0) -> None:
        self.urls = urls
        self.turn = 0
        self.lock = threading.Lock()
        self.client = httpx.Client(timeout=timeout)
        self.retried = 0

    def next_url(self) -> str:
        with self.lock:
            self.turn += 1
            return self.urls[self.turn % len(self.urls)]

    def request(self, method: str, path: str, *, within: float = 60.0, **kw: Any) -> httpx.Response:
        deadline = time.monotonic() + within
        while True:
            try:
                answer = self.client.request(method, self.next_url() + path, **kw)
                if answer.status_code not in RETRIED:
                    return answer
            except httpx.HTTPError:
                pass
            self.retried += 1
            if time.monotonic() > deadline:
                raise TimeoutError(f"{method} {path}: no replica answered in {within} s")
            time.sleep(0.1)


def ledger_script(ledger: Path, body: str) -> list[str]:
    """``sh -c`` around ``body``: a start line before it, a done line after it."""
    mark = 'echo "$RUNPLANE_JOB_ID $(basename "$PWD")'
    start = f'{mark} start $(date +%s.%N) $PWD" >> {ledger}'
    return ["sh", "-c", f'{start}; {body}; {mark} done $(date +%s.%N) $PWD" >> {ledger}']


def job_body(rng: random.Random, ledger: Path, markers: Path) -> tuple[str, dict[str, Any]]:
    """A job of a random kind: ``quick``, ``sleep``, ``retry`` (fails its first try:
    a marker file says a try was made) or ``lines`` (20 numbered lines over ~4 s)."""
    kind = rng.choices(("quick", "sleep", "retry", "lines"), (45, 25, 15, 15))[0]
    if kind == "quick":
        body = "echo quick"
    elif kind == "sleep":
        body = f"sleep {rng.uniform(1, 4):.1f}"
    elif kind == "lines":
        body = "for i in $(seq 1 20); do echo line $i; sleep 0.2; done"
    else:
        marker = f"{markers}/$RUNPLANE_JOB_ID"
        failed = f'"$RUNPLANE_JOB_ID $(basename "$PWD") failed $(date +%s.%N) $PWD" >> {ledger}'
        body = f"if [ ! -e {marker} ]; then touch {marker}; echo {failed}; exit 1; fi; echo second"
    spec: dict[str, Any] = {"stack": "shell", "command": ledger_script(ledger, body)}
    if kind == "retry":
        spec["retry"] = {"limit": 3, "on": ["failed"], "backoff_sec": 1, "backoff_factor": 1}
    return kind, spec


@dataclass
class Followed:
    job_id: str
    seen: list[tuple[int, str]] = field(default_factory=list)
    reconnects: int = 0
    ended: bool = False


def follow_log(api: Failover, followed: Followed, stop: threading.Event) -> None:
    """Follow a job's events over SSE, reconnecting to the next replica with
    Last-Event-ID after every drop, until its terminal phase event (or ``stop``)."""
    last: str | None = None
    timeout = httpx.Timeout(10.0, read=30.0)
    with httpx.Client(timeout=timeout) as client:
        while not stop.is_set():
            headers = {"Last-Event-ID": last} if last is not None else {}
            url = f"{api.next_url()}/v1/jobs/{followed.job_id}/events"
            try:
                with client.stream("GET", url, headers=headers) as response:
                    if response.status_code != 200:
                        time.sleep(0.2)
                        continue
                    event_id, kind = None, None
                    for line in response.iter_lines():
                        if line.startswith("id: "):
                            event_id = line[4:]
                        elif line.startswith("event: "):
                            kind = line[7:]
                        elif line.startswith("data: ") and event_id is not None:
                            data = json.loads(line[6:])
                            if kind == "log" and data.get("stream") == "stdout":
                                followed.seen.append((int(event_id), data["line"]))
                            if kind == "phase" and data.get("phase") in TERMINAL:
                                followed.ended = True
                            last = event_id
                        if stop.is_set():
                            return
                if followed.ended:
                    return
            except (httpx.HTTPError, ValueError):
                time.sleep(0.2)
            followed.reconnects += 1


class Submitter:
    """Submits jobs at ``rate`` per second in a thread; starts a log follower for up to
    ``followers`` of the ``lines`` jobs at a time."""

    def __init__(
        self, api: Failover, rng: random.Random, shared: Path, rate: float, followers: int
    ) -> None:
        self.api = api
        self.rng = rng
        self.ledger = shared / "ledger"
        self.markers = shared / "markers"
        self.rate = rate
        self.max_followers = followers
        self.submitted = 0
        self.acknowledged: dict[str, str] = {}  # job id -> kind
        self.refused: dict[str, int] = {}  # a final non-202 answer, by status
        self.gave_up = 0
        self.followed: list[Followed] = []
        self.follower_threads: list[threading.Thread] = []
        self.stop = threading.Event()
        self.stop_followers = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="submitter")

    def _run(self) -> None:
        start = time.monotonic()
        n = 0
        while not self.stop.is_set():
            wait = start + n / self.rate - time.monotonic()
            if wait > 0 and self.stop.wait(wait):
                return
            n += 1
            self.submit_one()

    def submit_one(self) -> None:
        kind, body = job_body(self.rng, self.ledger, self.markers)
        self.submitted += 1
        key = uuid.uuid4().hex
        try:
            answer = self.api.request(
                "POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key}, within=90
            )
        except TimeoutError:
            self.gave_up += 1
            return
        if answer.status_code != 202:
            code = str(answer.status_code)
            self.refused[code] = self.refused.get(code, 0) + 1
            return
        job_id = str(answer.json()["job_id"])
        self.acknowledged[job_id] = kind
        live = sum(1 for t in self.follower_threads if t.is_alive())
        if kind == "lines" and live < self.max_followers:
            followed = Followed(job_id)
            self.followed.append(followed)
            thread = threading.Thread(
                target=follow_log, args=(self.api, followed, self.stop_followers), daemon=True
            )
            thread.start()
            self.follower_threads.append(thread)


def pipeline_body(ledger: Path, n: int) -> dict[str, Any]:
    """a -> (b, c) -> d; ``c`` fails on odd runs (``d`` is then skipped and the run
    fails), as its stages say."""
    fail = "exit 3" if n % 2 else "true"

    def stage(name: str, body: str, needs: list[str]) -> dict[str, Any]:
        return {
            "name": name,
            "needs": needs,
            "stack": "shell",
            "command": ledger_script(ledger, body),
        }

    return {
        "name": f"chaos-{n}",
        "stages": [
            stage("a", "sleep 1", []),
            stage("b", "sleep 2", ["a"]),
            stage("c", f"sleep 1; {fail}", ["a"]),
            stage("d", "echo report", ["b", "c"]),
        ],
    }


class Pipelines:
    """Starts a pipeline every ``every`` seconds in a thread."""

    def __init__(self, api: Failover, shared: Path, every: float) -> None:
        self.api = api
        self.ledger = shared / "ledger"
        self.every = every
        self.runs: list[str] = []
        self.refused = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="pipelines")

    def _run(self) -> None:
        n = 0
        while not self.stop.wait(self.every if n else 2.0):
            n += 1
            try:
                answer = self.api.request(
                    "POST", "/v1/pipelines", json=pipeline_body(self.ledger, n)
                )
            except TimeoutError:
                self.refused += 1
                continue
            if answer.status_code == 202:
                self.runs.append(str(answer.json()["pipeline_run_id"]))
            else:
                self.refused += 1


def expected_status(stages: list[dict[str, Any]]) -> str:
    """A finished run's status from its stages (docs/pipelines.md)."""
    if any(s["phase"] == "failed" and not s.get("allow_failure") for s in stages):
        return "failed"
    if any(s["phase"] == "cancelled" for s in stages):
        return "cancelled"
    return "succeeded"
