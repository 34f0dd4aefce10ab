"""Property: hostile agents cannot hurt the server (issue 41 item 6; docs/agent.md "Checks on
what an agent sends").

Hypothesis draws what an enrolled node could send over a real WebSocket to a live server:
a hello (a good one, one with a hostile facts or top-level field, or a raw frame: deep
nesting, bytes that are not JSON, random JSON), then hostile reports (every report type
with one field replaced by NUL and control characters, lone surrogates, huge or negative
numbers, NaN, deep or random JSON; frames over the size limit; binary frames), some for a
job the server really placed on that node. Each example ends with a ``job_finished`` probe
whose ack says the server read everything. Throughout: the server closes a session only
with an application code (4400 for what is not a message of the protocol, 4401 for a
credential), never a crash; it keeps answering ``/healthz``; afterwards another node (a
real agent) still runs its job, nothing stored holds a NUL, and no error was logged.
"""

from __future__ import annotations

import itertools
import json
import logging
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import trio
import trio_websocket
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runplane.agent import protocol as p

from .conftest import LiveServer, StartAgent, job_logs, submit, wait_phase
from .test_agent_input_e2e import FACTS, connect_url, texts_with_nul

#: Kept small: each example is a session on the live server (the whole run takes seconds).
EXAMPLES = 40
JOB, ATTEMPT = "@job", "@attempt"
#: Close codes a hostile session may get: a malformed message, a refused credential, a
#: protocol version the server does not speak.
APPLICATION_CLOSES = {p.CLOSE_PROTOCOL_ERROR, p.CLOSE_UNAUTHORIZED, p.CLOSE_UPGRADE_REQUIRED}

HOSTILE_CHARS = ["\x00", "\x01", "\n", "\x1b", "\x7f", "\ud83d", "\udc00", "\ufffe", "é", "🚀"]
hostile_text = st.one_of(
    st.text(max_size=20),
    st.text(max_size=8).map(lambda s: s[:4] + "\x00" + s[4:]),
    st.sampled_from([*HOSTILE_CHARS, "a" * 300, "..", "", " "]),
    st.lists(st.sampled_from([*HOSTILE_CHARS, "a", "_", "-"]), max_size=8).map("".join),
)
hostile_int = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([-1, 0, 1, 2**31, 2**63, -(2**63) - 1, 10**30]),
)
#: NaN and infinities too: json.dumps writes them as NaN / Infinity
hostile_number = st.one_of(hostile_int, st.floats())
json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), hostile_number, hostile_text),
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(hostile_text, children, max_size=4)
    ),
    max_leaves=10,
)
#: A field's hostile values: its own shape with hostile parts, or anything at all.
SHAPED: dict[str, Any] = {
    "lines": st.lists(
        st.one_of(
            st.tuples(st.sampled_from(["stdout", "stderr"]), hostile_text),
            st.tuples(st.just("stdout"), hostile_text, hostile_text),
        ),
        max_size=4,
    ),
    "values": st.dictionaries(hostile_text, hostile_number, max_size=4),
    "chunks": st.lists(
        st.fixed_dictionaries(
            {
                "data": hostile_text,
                "encoding": st.sampled_from(["json", "text", "base64"]),
                "ts": hostile_number,
            }
        ),
        max_size=3,
    ),
    "running": st.lists(
        st.fixed_dictionaries({"job_id": hostile_text, "attempt": hostile_number}), max_size=3
    ),
    "gpus": st.lists(
        st.fixed_dictionaries({"model": hostile_text, "vram_gb": hostile_number}), max_size=3
    ),
}
SHAPED["final_metrics"] = SHAPED["values"]
for _name in ("job_id", "stream", "signal", "error", "version", "declined", "name", "arch", "os"):
    SHAPED[_name] = hostile_text
for _name in ("agent_version", "channel", "credential", "join_token", "advertise_address"):
    SHAPED[_name] = hostile_text
for _name in ("attempt", "n", "step", "exit_code", "seq", "protocol", "cpu_cores", "ram_gb"):
    SHAPED[_name] = hostile_int
for _name in ("disk_gb", "max_concurrency", "dlperf", "deadline_sec"):
    SHAPED[_name] = hostile_number
SHAPED["phase"] = st.sampled_from(["running", "pulling", "installing", "failed"])
SHAPED["outcome"] = st.sampled_from(["succeeded", "failed", "timeout", "cancelled"])
SHAPED["capabilities"] = SHAPED["executors"] = st.lists(hostile_text, max_size=4)
SHAPED["artifacts"] = st.lists(st.dictionaries(hostile_text, json_values, max_size=4), max_size=3)
SHAPED["images"] = st.fixed_dictionaries(
    {"digests": st.lists(hostile_text, max_size=3), "free_bytes": hostile_number}
)

#: Each report type: a valid frame, and the fields one example may make hostile.
REPORTS: dict[str, tuple[dict[str, Any], list[str]]] = {
    "job_logs": (
        {"lines": [["stdout", "ok"]]},
        ["lines", "lines", "lines", "n", "job_id", "attempt"],
    ),
    "job_metric": ({"values": {"m": 1.0}}, ["values", "values", "step", "n", "attempt"]),
    "job_phase": ({"phase": "running"}, ["phase", "gpus", "job_id"]),
    "job_finished": (
        {"outcome": "failed"},
        ["outcome", "exit_code", "signal", "error", "final_metrics", "artifacts"],
    ),
    "job_stream": (
        {"stream": "s", "chunks": [{"data": "d", "ts": 1}]},
        ["stream", "chunks", "chunks"],
    ),
    "teleop_ack": ({"stream": "s", "seq": 1, "ok": True}, ["stream", "seq", "error"]),
    "job_released": ({}, ["declined", "attempt"]),
}
UNKEYED: dict[str, tuple[dict[str, Any], list[str]]] = {
    "heartbeat": ({"running": []}, ["running", "images"]),
    "update_status": ({"version": "1", "phase": "failed"}, ["version", "phase", "error"]),
    "draining": ({"deadline_sec": 1}, ["deadline_sec"]),
}
FACT_FIELDS = [
    *("name", "cpu_cores", "ram_gb", "disk_gb", "arch", "os", "capabilities", "gpus"),
    *("max_concurrency", "dlperf", "executors", "images", "advertise_address"),
]
TOP_FIELDS = ["agent_version", "protocol", "running", "channel", "credential", "join_token"]


def hostile(name: str) -> Any:
    """Mostly a value of the field's type with hostile content (past the protocol's own
    validation, to the checks and the store), sometimes anything at all."""
    return st.integers(0, 7).flatmap(lambda i: SHAPED[name] if i else json_values)


def deep(depth: int) -> str:
    return '{"type": "job_logs", "lines": ' + "[" * depth + "]" * depth + "}"


@st.composite
def raw_frames(draw: st.DrawFn) -> str | bytes:
    kind = draw(st.sampled_from(["deep", "bytes", "json", "big"]))
    if kind == "deep":
        return deep(
            draw(st.one_of(st.sampled_from([65, 300, 2_000, 20_000]), st.integers(60, 5_000)))
        )
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    if kind == "big":  # over the frame limit
        return json.dumps({"type": "job_logs", "lines": [["stdout", "z" * (9 * 2**20)]]})
    return json.dumps(draw(json_values))


@dataclass
class Case:
    """One example: a node says a hostile hello; another, welcomed, is given a job and
    sends hostile reports (most of them of it)."""

    hello: str | bytes
    reports: list[str | bytes | dict[str, Any]] = field(default_factory=list)


@st.composite
def reports(draw: st.DrawFn) -> str | bytes | dict[str, Any]:
    if draw(st.integers(0, 9)) == 0:
        return draw(raw_frames())
    # the reports the server stores, more often
    stored = ["job_logs", "job_stream", "job_metric", "job_finished"]
    kind = draw(st.sampled_from(stored * 3 + sorted(REPORTS) + sorted(UNKEYED)))
    keyed = kind in REPORTS
    base, fields = REPORTS[kind] if keyed else UNKEYED[kind]
    frame: dict[str, Any] = {"type": kind, **base}
    if keyed:
        frame |= {"job_id": JOB, "attempt": ATTEMPT}
    name = draw(st.sampled_from(fields))
    frame[name] = draw(hostile(name))
    return frame


@st.composite
def cases(draw: st.DrawFn) -> Case:
    kind = draw(st.sampled_from(["fact", "fact", "top", "raw"]))
    facts: dict[str, Any] = dict(FACTS)
    hello: dict[str, Any] = {"type": "hello", "protocol": 1, "agent_version": "fuzz"}
    if kind == "raw":
        return Case(draw(raw_frames()), draw(st.lists(reports(), min_size=2, max_size=8)))
    if kind == "fact":
        name = draw(st.sampled_from(FACT_FIELDS))
        facts[name] = draw(hostile(name))
    else:
        name = draw(st.sampled_from(TOP_FIELDS))
        hello[name] = draw(hostile(name))
    frame = json.dumps({**hello, "facts": facts})
    return Case(frame, draw(st.lists(reports(), min_size=2, max_size=8)))


@dataclass
class Node:
    """One hostile node's session on the live server."""

    server: LiveServer
    number: int
    ws: trio_websocket.WebSocketConnection
    key: dict[str, Any] = field(default_factory=lambda: {"job_id": "none", "attempt": 1})

    async def hello(self, frame: str | bytes | None = None) -> bool:
        """Say hello; True when welcomed, False when closed as it may be."""
        capability = f"fuzz-{self.number}"
        good = {**FACTS, "name": f"fuzz{self.number}", "capabilities": [capability]}
        body = {"type": "hello", "protocol": 1, "agent_version": "fuzz", "facts": good}
        await self.ws.send_message(frame if frame is not None else json.dumps(body))
        answer = await self.next_message()
        if isinstance(answer, p.Refused):
            answer = await self.next_message()
        if answer is None:
            return False
        assert isinstance(answer, p.Welcome), answer
        assert isinstance(await self.next_message(), p.Resume)
        return True

    async def next_message(self) -> p.ServerMsg | None:
        """The server's next message; None when it closed (as it may: checked)."""
        try:
            with trio.fail_after(30):  # a hang detector
                return p.decode_server(await self.ws.get_message())
        except trio_websocket.ConnectionClosed as exc:
            assert exc.reason is not None and exc.reason.code in APPLICATION_CLOSES, exc.reason
            return None

    async def take_a_job(self, client: httpx.AsyncClient) -> None:
        body = {"stack": "shell", "requires": {"capabilities": [f"fuzz-{self.number}"]}}
        job_id = await submit(client, {**body, "command": ["x"]})
        while True:
            msg = await self.next_message()
            assert msg is not None
            if isinstance(msg, p.Run) and msg.job_id == job_id:
                self.key = {"job_id": job_id, "attempt": msg.attempt}
                return

    async def send(self, report: str | bytes | dict[str, Any]) -> bool:
        if isinstance(report, dict):
            report = dict(report)
            if report.get("job_id") == JOB:
                report["job_id"] = self.key["job_id"]
            if report.get("attempt") == ATTEMPT:
                report["attempt"] = self.key["attempt"]
            report = json.dumps(report)
        try:
            await self.ws.send_message(report)
        except trio_websocket.ConnectionClosed as exc:
            assert exc.reason is not None and exc.reason.code in APPLICATION_CLOSES, exc.reason
            return False
        return True

    async def probe(self) -> None:
        """A finish of no job: its ack says the server read every frame before it."""
        probe = f"probe-{self.number}"
        if not await self.send(
            {"type": "job_finished", "job_id": probe, "attempt": 1, "outcome": "failed"}
        ):
            return
        while True:
            msg = await self.next_message()
            if msg is None or (isinstance(msg, p.FinishedAck) and msg.job_id == probe):
                return


def _is_a_finish(report: str | bytes | dict[str, Any]) -> bool:
    return isinstance(report, dict) and report.get("type") == "job_finished"


async def one_example(server: LiveServer, number: int, case: Case) -> None:
    async with server.client() as client:
        async with trio_websocket.open_websocket_url(connect_url(server)) as ws:
            await Node(server, number, ws).hello(case.hello)  # welcomed or closed as it may
        async with trio_websocket.open_websocket_url(connect_url(server)) as ws:
            node = Node(server, number, ws)
            assert await node.hello()
            await node.take_a_job(client)
            # a finish last: reports after it are not stored
            finish_last = sorted(case.reports, key=_is_a_finish)
            if all([await node.send(r) for r in finish_last]):
                await node.probe()
        # not left to count against the org's quota of live runs
        await client.post(f"/v1/jobs/{node.key['job_id']}/cancel")
        assert (await client.get("/healthz")).status_code == 200


async def test_hostile_agents_cannot_hurt_the_server(
    server: LiveServer,
    data_dir: Any,
    start_agent: StartAgent,
    caplog: pytest.LogCaptureFixture,
) -> None:
    start_agent(server.url, "steady", "--capability", "steady")
    numbers = itertools.count()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(case=cases())
    def hostile_sessions(case: Case) -> None:
        trio.from_thread.run(one_example, server, next(numbers), case)

    with caplog.at_level(logging.WARNING):
        await trio.to_thread.run_sync(hostile_sessions)
    async with server.client() as client:
        body = {"stack": "shell", "command": ["echo", "steady"]}
        job_id = await submit(client, {**body, "requires": {"capabilities": ["steady"]}})
        assert (await wait_phase(client, job_id, "succeeded", "failed"))["phase"] == "succeeded"
        assert await job_logs(client, job_id, "stdout") == ["steady"]
    assert texts_with_nul(data_dir) == []
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
