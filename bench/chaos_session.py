"""The session of ``bench chaos``: a pod whose one service echoes every teleop frame of
stream ``control`` back onto it (``bench.pods.ECHO``), driven at a few frames a second for
a while, its stream followed over SSE (reconnecting with Last-Event-ID after every drop),
kept alive, then ended with ``DELETE``."""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any

import httpx

from bench import pods
from bench.chaos_work import Failover

ECHO = pods.ECHO.replace('"bench.teleop"', '"control.teleop"').replace('"bench"', '"control"')
ENDED = ("stopped", "failed")


class SessionDriver:
    def __init__(self, api: Failover, seconds: float, rate: float = 5.0) -> None:
        self.api = api
        self.seconds = seconds
        self.rate = rate
        self.session_id = ""
        self.ticket = ""
        self.job_id = ""
        self.phases: list[str] = []
        self.teleop: dict[str, int] = {}  # answers by status
        self.sent = 0
        self.seqs: list[int] = []
        self.echoes: list[int] = []
        #: (seq, the echoed frame's n) of every chunk received, in order
        self.chunks: list[tuple[int, int | None]] = []
        self.lagged_dropped = 0
        self.reconnects = 0
        self.error = ""
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="session")

    def _run(self) -> None:
        try:
            self._drive()
        except Exception as exc:  # reported in the figures
            self.error = f"{type(exc).__name__}: {exc}"

    def _phase(self) -> str:
        view = self.api.request("GET", f"/v1/sessions/{self.session_id}").json()
        phase = str(view["phase"])
        if not self.phases or self.phases[-1] != phase:
            self.phases.append(phase)
        return phase

    def _wait(self, phases: tuple[str, ...], within: float) -> str:
        deadline = time.monotonic() + within
        phase = self._phase()
        while phase not in phases and time.monotonic() < deadline:
            time.sleep(0.5)
            phase = self._phase()
        return phase

    def _drive(self) -> None:
        body = {
            "name": "chaos",
            "idle_ttl_sec": 600,
            "teleop_stream": "control",
            "pod": {
                "services": [{"name": "echo", "stack": "shell", "command": ["python3", "-c", ECHO]}]
            },
        }
        answer = self.api.request("POST", "/v1/sessions", json=body)
        if answer.status_code != 202:
            raise RuntimeError(f"POST /v1/sessions: {answer.status_code} {answer.text[:200]}")
        view = answer.json()
        self.session_id, self.job_id = view["id"], view["job_id"]
        if self._wait(("ready",), 120) != "ready":
            raise RuntimeError(f"session not ready: {self.phases}")
        follower = threading.Thread(target=self._follow, daemon=True)
        follower.start()
        start = time.monotonic()
        keepalive = ticket_at = start
        self._subscribe()
        while time.monotonic() - start < self.seconds and not self.stop.is_set():
            time.sleep(max(0.0, start + self.sent / self.rate - time.monotonic()))
            self._teleop({"n": self.sent})
            self.sent += 1
            if time.monotonic() - ticket_at > 30:  # a ticket is valid 60 s
                ticket_at = time.monotonic()
                self._subscribe()
            if time.monotonic() - keepalive > 20:
                keepalive = time.monotonic()
                self.api.request("POST", f"/v1/sessions/{self.session_id}/keepalive")
        time.sleep(2)  # the last echoes
        self.api.request("DELETE", f"/v1/sessions/{self.session_id}")
        self._wait(ENDED, 120)
        self.stop.set()
        follower.join(15)

    def _subscribe(self) -> None:
        path = f"/v1/jobs/{self.job_id}/streams/control/subscribe"
        answer = self.api.request("POST", path)
        if answer.status_code == 200:
            self.ticket = str(answer.json()["ticket"])

    def _teleop(self, frame: dict[str, Any]) -> None:
        path = f"/v1/jobs/{self.job_id}/streams/control/teleop"
        headers = {"Authorization": f"Bearer {self.ticket}"}
        try:
            answer = self.api.request("POST", path, json=frame, headers=headers, within=10)
            code = str(answer.status_code)
        except TimeoutError:
            code = "timeout"
        self.teleop[code] = self.teleop.get(code, 0) + 1

    def _follow(self) -> None:
        last: str | None = None
        with httpx.Client(timeout=httpx.Timeout(10.0, read=30.0)) as client:
            while not self.stop.is_set():
                headers = {"Last-Event-ID": last} if last is not None else {}
                url = f"{self.api.next_url()}/v1/jobs/{self.job_id}/streams/control/data"
                try:
                    with client.stream("GET", url, headers=headers) as response:
                        if response.status_code == 200:
                            last = self._read(response, last)
                except (httpx.HTTPError, ValueError):
                    pass
                self.reconnects += 1
                self.stop.wait(0.2)

    def _read(self, response: httpx.Response, last: str | None) -> str | None:
        event_id, kind = None, None
        for line in response.iter_lines():
            if line.startswith("id: "):
                event_id = line[4:]
            elif line.startswith("event: "):
                kind = line[7:]
            elif line.startswith("data: "):
                data = json.loads(line[6:])
                if kind == "lagged":
                    self.lagged_dropped += int(data.get("dropped", 0))
                elif "seq" in data:
                    echo = json.loads(data["data"]).get("echo") if "data" in data else None
                    n = int(echo["n"]) if isinstance(echo, dict) and "n" in echo else None
                    self.seqs.append(int(data["seq"]))
                    self.chunks.append((int(data["seq"]), n))
                    if n is not None:
                        self.echoes.append(n)
                if event_id is not None:
                    last = event_id
            if self.stop.is_set():
                break
        return last

    def figures(self) -> dict[str, Any]:
        seqs = self.seqs
        return {
            "session_id": self.session_id,
            "phases": self.phases,
            "ended": bool(self.phases) and self.phases[-1] in ENDED,
            "error": self.error,
            "teleop_sent": self.sent,
            "teleop_answers": self.teleop,
            "echoes_received": len(set(self.echoes)),
            "stream_chunks": len(seqs),
            "stream_duplicated": len(seqs) - len(set(seqs)),
            "stream_out_of_order": sum(1 for a, b in itertools.pairwise(seqs) if b <= a),
            "stream_lagged_dropped": self.lagged_dropped,
            "stream_reconnects": self.reconnects,
            # each chunk whose seq is not above the one before: [seq, its frame's n], and
            # the chunk before it
            "stream_repeats": [
                [list(a), list(b)] for a, b in itertools.pairwise(self.chunks) if b[0] <= a[0]
            ][:5],
        }
