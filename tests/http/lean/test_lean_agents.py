"""The agents' WebSocket on its lean lane (runplane/http/lean/agents.py) answers as the
Quart route does: each conversation is held with two live servers (hypercorn on loopback,
real WebSockets), lanes on and ``RUNPLANE_LEAN_LANES=0``, and gives the same frames and
close codes on both. The Quart route's view counts its calls: on the lanes-on server it
answers only what the lane hands it, so each test also proves which lane answered."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import ConnectionClosed, ConnectionRejected, open_websocket_url

from bench.simagents import hello as sim_hello
from runplane.agent import protocol as p
from runplane.http import agent_session, readiness
from runplane.persistence import DB_FILENAME, sqlite
from runplane.runtime.throttle import OnceEvery
from tests.e2e.conftest import (
    LiveServer,
    e2e_settings,
    job_logs,
    start_server,
    submit,
    wait_for,
    wait_phase,
)

ENDPOINT = "agents.connect"
HEARTBEAT_SEC = 5.0
#: a frame of the protocol no model takes: closes the session with 4400
MALFORMED = json.dumps({"type": "heartbeat", "running": "not a list"})


@dataclass
class Served:
    live: LiveServer
    #: calls of the Quart route's view (the lane answered the rest)
    quart_calls: list[str]
    data_dir: Path

    @property
    def ws_url(self) -> str:
        return self.live.url.replace("http://", "ws://") + "/v1/nodes/connect"

    def client(self) -> httpx.AsyncClient:
        return self.live.client()


async def _serve(nursery: trio.Nursery, data_dir: Path, **env: str) -> Served:
    live = await start_server(nursery, e2e_settings(data_dir, **env), heartbeat_sec=HEARTBEAT_SEC)
    views = live.app.view_functions
    route = views[ENDPOINT]
    calls: list[str] = []

    async def counted() -> None:
        calls.append(ENDPOINT)
        await route()

    views[ENDPOINT] = functools.update_wrapper(counted, route)  # its @doc (auth rule) too
    return Served(live, calls, data_dir)


@pytest.fixture
async def both(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[tuple[Served, Served]]:
    """Two servers: the lean lanes on (the default), and off."""
    lean = await _serve(nursery, tmp_path / "lean")
    quart = await _serve(nursery, tmp_path / "quart", lean_lanes="0")
    yield lean, quart
    for served in (lean, quart):
        served.live.stop.set()
        await served.live.done.wait()


def _normal(frame: str) -> Any:
    """A frame with what differs between two servers (ids, credentials) named instead."""
    data = json.loads(frame)
    for key in ("node_id", "credential"):
        if data.get(key):
            data[key] = f"<{key}>"
    return data


#: a step: a frame to send, or how many frames to read
Step = str | int


async def talk(
    url: str,
    script: Sequence[Step],
    *,
    until_closed: bool = True,
    headers: Sequence[tuple[str, str]] = (),
) -> list[Any]:
    """What the server says to ``script``: the frames read, then how it closed the
    session (read for up to 10 s when ``until_closed``; else the client closes it)."""
    said: list[Any] = []
    try:
        async with open_websocket_url(url, extra_headers=list(headers)) as ws:
            try:
                for step in script:
                    if isinstance(step, str):
                        await ws.send_message(step)
                        continue
                    for _ in range(step):
                        said.append(_normal(str(await ws.get_message())))
                if until_closed:
                    with trio.fail_after(10):
                        while True:
                            said.append(_normal(str(await ws.get_message())))
            except ConnectionClosed as closed:
                said.append(("closed", closed.reason.code, closed.reason.reason))
    except ConnectionRejected as rejected:
        said.append(("rejected", rejected.status_code, json.loads(rejected.body or b"{}")))
    return said


async def on_both(
    both: tuple[Served, Served], conversation: Callable[[Served], Any]
) -> tuple[Any, Any]:
    lean, quart = both
    return await conversation(lean), await conversation(quart)


def hello(**changes: Any) -> str:
    data = json.loads(sim_hello(1, 4, 2))
    data.update(changes)
    return json.dumps(data)


WELCOME = {"type": "welcome", "protocol": 1, "node_id": "<node_id>", "heartbeat_sec": HEARTBEAT_SEC}


async def test_hello_welcome_resume_and_reconnect(both: tuple[Served, Served]) -> None:
    async def conversation(served: Served) -> list[Any]:
        first = await talk(served.ws_url, [hello(), 2], until_closed=False)
        credential = await _credential(served)
        again = await talk(served.ws_url, [probe(credential), 2], until_closed=False)
        return [first, again]

    lean, quart = await on_both(both, conversation)
    assert lean == quart
    enrolled, reconnected = lean
    assert enrolled == [{**WELCOME, "credential": "<credential>"}, {"type": "resume", "marks": []}]
    assert reconnected[0]["type"] == "welcome" and reconnected[1]["type"] == "resume"
    assert both[0].quart_calls == [] and len(both[1].quart_calls) == 3


def probe(credential: str | None = None) -> str:
    """The hello of the node "probe", with its credential once it has one."""
    return hello(credential=credential, facts={**json.loads(hello())["facts"], "name": "probe"})


async def _credential(served: Served) -> str:
    """The node credential "probe" gets when it enrolls."""
    async with open_websocket_url(served.ws_url) as ws:
        await ws.send_message(probe())
        welcome = p.decode_server(await ws.get_message())
    assert isinstance(welcome, p.Welcome) and welcome.credential
    return welcome.credential


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(
            hello(facts={**json.loads(hello())["facts"], "name": "x" * 300}), id="refused"
        ),
        pytest.param(hello(credential="rpn_not_a_credential"), id="unknown-credential"),
        pytest.param(hello(protocol=0), id="old-protocol"),
        pytest.param("not a hello", id="not-json"),
        pytest.param(p.encode(p.Heartbeat()), id="not-hello-first"),
        pytest.param(hello(join_token="rpj_unknown"), id="unknown-join-token"),
    ],
)
async def test_a_hello_refused_the_same_way(both: tuple[Served, Served], first: str) -> None:
    lean, quart = await on_both(both, lambda served: talk(served.ws_url, [first]))
    assert lean == quart
    assert lean[-1][0] == "closed" and lean[-1][1] in (4400, 4401, 4426)
    assert both[0].quart_calls == []


async def test_the_refusals_name_their_codes(both: tuple[Served, Served]) -> None:
    lean = both[0]
    refused = await talk(
        lean.ws_url, [hello(facts={**json.loads(hello())["facts"], "name": "\x01"})]
    )
    assert refused[0]["type"] == "refused" and refused[0]["code"] == 4400
    assert refused[-1][:2] == ("closed", 4400)
    unknown = await talk(lean.ws_url, [hello(credential="rpn_not_a_credential")])
    assert unknown[-1][:2] == ("closed", p.CLOSE_UNAUTHORIZED)
    old = await talk(lean.ws_url, [hello(protocol=0)])
    assert old[-1][:2] == ("closed", p.CLOSE_UPGRADE_REQUIRED)


async def test_enrollments_over_the_address_limit_close_4429(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """``RUNPLANE_RATE_LIMIT_ADDRESS``: the fourth enrollment from one address within the
    window is closed with 4429 (the agent retries after its backoff), on both lanes."""
    limits = {"auth": "required", "rate_limit_address": "1/min,burst=3"}
    lean = await _serve(nursery, tmp_path / "lean", **limits)
    quart = await _serve(nursery, tmp_path / "quart", lean_lanes="0", **limits)
    said = []
    for served in (lean, quart):
        said.append(
            [(await talk(served.ws_url, [hello(join_token="rpj_x")]))[-1][:2] for _ in range(4)]
        )
        served.live.stop.set()
        await served.live.done.wait()
    assert said[0] == said[1] == [("closed", p.CLOSE_UNAUTHORIZED)] * 3 + [("closed", 4429)]
    assert lean.quart_calls == []


async def test_no_hello_in_time(
    both: tuple[Served, Served], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(agent_session, "HELLO_TIMEOUT", 0.5)
    lean, quart = await on_both(both, lambda served: talk(served.ws_url, []))
    assert lean == quart == [("closed", 4400, "no hello within 0.5 s")]


async def test_a_malformed_later_frame_closes_with_4400(both: tuple[Served, Served]) -> None:
    script = [hello(), 2, p.encode(p.Heartbeat()), MALFORMED]
    lean, quart = await on_both(both, lambda served: talk(served.ws_url, script))
    assert lean == quart
    assert lean[-1][:2] == ("closed", 4400) and "bad message" in lean[-1][2]


async def test_unknown_types_and_refused_reports_keep_the_session(
    both: tuple[Served, Served],
) -> None:
    """A newer agent's frame type is ignored, a report the checks refuse dropped: the
    session goes on (the malformed frame after them is what closes it)."""
    newer = json.dumps({"type": "from_the_future", "x": 1})
    refused = json.dumps({"type": "job_phase", "job_id": "j\x01", "attempt": 1, "phase": "running"})
    script = [hello(), 2, newer, refused, MALFORMED]
    lean, quart = await on_both(both, lambda served: talk(served.ws_url, script))
    assert lean == quart
    assert lean[-1][:2] == ("closed", 4400) and "bad message" in lean[-1][2]


async def test_a_replaced_session_is_closed_1000(both: tuple[Served, Served]) -> None:
    """The same node connecting again: the node actor closes the old session's outbox,
    and the old session ends as Quart ends a handler that returns (close 1000)."""

    async def conversation(served: Served) -> list[Any]:
        again = probe(await _credential(served))
        async with open_websocket_url(served.ws_url) as old:
            await old.send_message(again)
            said = [_normal(str(await old.get_message())) for _ in range(2)]
            await talk(served.ws_url, [again, 2], until_closed=False)
            try:
                with trio.fail_after(10):
                    while True:
                        said.append(_normal(str(await old.get_message())))
            except ConnectionClosed as closed:
                said.append(("closed", closed.reason.code, closed.reason.reason))
        return said

    lean, quart = await on_both(both, conversation)
    assert lean == quart
    assert lean[-1] == ("closed", 1000, None)


async def test_a_heartbeat_reaches_the_node_actor(both: tuple[Served, Served]) -> None:
    async def conversation(served: Served) -> list[Any]:
        async with open_websocket_url(served.ws_url) as ws, served.client() as client:
            await ws.send_message(hello())
            welcome = p.decode_server(await ws.get_message())
            assert isinstance(welcome, p.Welcome)
            await ws.get_message()  # resume

            async def beat() -> str | None:
                nodes = {n["id"]: n for n in (await client.get("/v1/nodes")).json()}
                return nodes[welcome.node_id]["last_heartbeat"]  # type: ignore[no-any-return]

            seen = [await beat()]
            # an idle beat (its short way), then one naming an attempt (checked, dispatched)
            running = [p.RunningJob(job_id="job_elsewhere", attempt=1)]
            for sent in (p.Heartbeat(), p.Heartbeat(running=running)):
                await trio.sleep(0.01)  # a later wall-clock ms
                await ws.send_message(p.encode(sent))
                seen.append(await wait_for(lambda: _changed(beat, seen[-1]), 10, "the beat"))
        return [None not in seen, len(set(seen))]

    lean, quart = await on_both(both, conversation)
    assert lean == quart == [True, 3]
    assert both[0].quart_calls == []


async def _changed(read: Callable[[], Any], before: Any) -> Any:
    now = await read()
    return now if now != before else None


async def test_a_credential_header_goes_to_quart(both: tuple[Served, Served]) -> None:
    """The auth hook reads an Authorization or share header: the lane hands the
    request to Quart, which answers as ever (an invalid share token: 401 before the
    upgrade; a bearer it cannot resolve: left to the hello)."""
    share = [("X-Share-Token", "shr_not_valid")]
    bearer = [("Authorization", "Bearer rpn_whatever")]

    async def conversation(served: Served) -> list[Any]:
        return [
            await talk(served.ws_url, [hello()], headers=share),
            await talk(served.ws_url, ["not a hello"], headers=bearer),
            await talk(served.ws_url + "?x=1", ["not a hello"]),
        ]

    lean, quart = await on_both(both, conversation)
    assert lean == quart
    assert lean[1][-1][:2] == ("closed", 4400) and lean[2][-1][:2] == ("closed", 4400)
    assert len(both[0].quart_calls) == 2  # the share token is refused before the view


async def test_a_store_outage_closes_1000_and_logs_it_once(
    nursery: trio.Nursery,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An enrollment while the SQLite file is locked by another process: the store is
    unavailable, which the session does not catch. Quart's error handler logs the
    outage (no unhandled error) and its websocket ends with 1000; the lane does both."""
    monkeypatch.setattr(sqlite, "BUSY_TIMEOUT_MS", 500)
    lean = await _serve(nursery, tmp_path / "lean")
    quart = await _serve(nursery, tmp_path / "quart", lean_lanes="0")
    said = []
    for served in (lean, quart):
        # the outage log is once per interval, process-wide: a fresh interval per server
        monkeypatch.setattr(readiness, "request_outage_log", OnceEvery(60.0))
        with _locked(served.data_dir / DB_FILENAME):
            caplog.clear()
            said.append(await talk(served.ws_url, [hello()]))
            outages = [r for r in caplog.records if r.getMessage() == "store unavailable"]
            assert [r.__dict__.get("method") for r in outages] == ["WEBSOCKET"]
            assert not [r for r in caplog.records if r.getMessage() == "unhandled error"]
        served.live.stop.set()
        await served.live.done.wait()
    assert said[0] == said[1] == [("closed", 1000, None)]
    assert lean.quart_calls == []


class _locked:
    """The database file write-locked by another process while inside."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> None:
        code = (
            "import sqlite3, sys\n"
            f"c = sqlite3.connect({str(self.path)!r}, isolation_level=None)\n"
            "c.execute('BEGIN EXCLUSIVE')\n"
            "print('locked', flush=True)\n"
            "sys.stdin.read()\n"
        )
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        assert self.proc.stdout.readline().strip() == "locked"

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """``runplane agent`` processes against a server URL (killed at the end)."""
    started: list[subprocess.Popen[bytes]] = []
    env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}

    def start(url: str) -> subprocess.Popen[bytes]:
        data, name = tmp_path / "agent", "lean-agent"
        command = [sys.executable, "-m", "runplane", "agent", "--server", url]
        proc = subprocess.Popen(
            [*command, "--data-dir", str(data), "--name", name],
            stdout=subprocess.DEVNULL,
            stderr=(tmp_path / "agent.log").open("wb"),
            env=env,
            start_new_session=True,
        )
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


async def test_a_job_runs_end_to_end_on_the_lean_lane(
    nursery: trio.Nursery, tmp_path: Path, start_agent: Callable[[str], Any]
) -> None:
    """A real agent (``runplane agent``) enrolls, takes a job and reports it to the end,
    its session carried by the lean lane alone."""
    lean = await _serve(nursery, tmp_path / "lean")
    start_agent(lean.live.url)
    async with lean.client() as client:
        script = "echo over the lean lane"
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", script]})
        view = await wait_phase(client, job_id, "succeeded", "failed", within=60)
        assert view["phase"] == "succeeded", (tmp_path / "agent.log").read_text()
        assert await job_logs(client, job_id, "stdout") == ["over the lean lane"]
    lean.live.stop.set()
    await lean.live.done.wait()
    assert lean.quart_calls == []
