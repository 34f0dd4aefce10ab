"""What an enrolled agent sends is checked like HTTP input (docs/agent.md "Checks on what an
agent sends"), on a live server over a real WebSocket: a hostile hello is refused naming
the field (a real agent prints it and stops), and hostile reports after a good hello are
dropped or cleaned without harming the server, the store or another node's job.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio_websocket

from runplane.agent import protocol as p
from runplane.persistence import DB_FILENAME

from .conftest import LiveServer, StartAgent, job_logs, submit, wait_for, wait_phase

FACTS: dict[str, Any] = {
    "name": "raw",
    "cpu_cores": 2,
    "ram_gb": 4,
    "arch": "x86_64",
    "os": "linux",
}


def connect_url(server: LiveServer) -> str:
    return server.url.replace("http://", "ws://") + "/v1/nodes/connect"


def hello_frame(**facts: Any) -> str:
    body = {"type": "hello", "protocol": 1, "agent_version": "test", "facts": {**FACTS, **facts}}
    return json.dumps(body)


async def say_hello(url: str, frame: str) -> tuple[list[p.ServerMsg], int | None, str | None]:
    """Send ``frame`` as the hello; what the server answered and how it closed (None: it
    stayed open, the answer was a welcome)."""
    answers: list[p.ServerMsg] = []
    async with trio_websocket.open_websocket_url(url) as ws:
        await ws.send_message(frame)
        with trio.fail_after(30):  # a hang detector
            try:
                while True:
                    answers.append(p.decode_server(await ws.get_message()))
                    if isinstance(answers[-1], p.Resume):
                        return answers, None, None
            except trio_websocket.ConnectionClosed as exc:
                assert exc.reason is not None
                return answers, exc.reason.code, exc.reason.reason
    raise AssertionError("unreachable")


def holds_nul(text: str) -> bool:
    """A NUL in ``text``, or in a string of the JSON it is (``\\u0000``, escaped)."""
    try:
        value = json.loads(text)
    except ValueError:
        return "\x00" in text
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str) and "\x00" in item:
            return True
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def texts_with_nul(data_dir: Path) -> list[tuple[str, str]]:
    """(table, value) of every stored text that holds a NUL, raw or as a JSON escape."""
    db = sqlite3.connect(f"file:{data_dir / DB_FILENAME}?mode=ro", uri=True)
    found: list[tuple[str, str]] = []
    try:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for value in row:
                    if isinstance(value, str) and holds_nul(value):
                        found.append((table, value[:200]))
    finally:
        db.close()
    return found


async def node_names(client: httpx.AsyncClient) -> list[str]:
    return [n["name"] for n in (await client.get("/v1/nodes")).json()]


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (
            hello_frame(name="bad\x00name"),
            "bad hello: facts.name: contains the control character \\u0000",
        ),
        (
            hello_frame(capabilities=["c" * 100] * 100_000),
            "bad hello: (frame): is longer than 8388608 bytes",
        ),
        (
            '{"type": "hello", "facts": ' + "[" * 10_000 + "]" * 10_000 + "}",
            "bad hello: (frame): nested deeper than 64 levels",
        ),
        (hello_frame(cpu_cores=10**6), "bad hello: facts.cpu_cores: 1000000 is outside 1 to 65536"),
        (
            hello_frame(gpus=[{"model": "H100\n"}]),
            "bad hello: facts.gpus.0.model: contains the control character \\u000a",
        ),
    ],
    ids=["nul-name", "10mb-facts", "deep", "absurd-cores", "gpu-name"],
)
async def test_a_hostile_hello_is_refused_with_the_field_named(
    server: LiveServer, frame: str, reason: str
) -> None:
    answers, code, said = await say_hello(connect_url(server), frame)
    assert code == p.CLOSE_PROTOCOL_ERROR
    assert answers == [p.Refused(code=p.CLOSE_PROTOCOL_ERROR, reason=reason)]
    assert said is not None and reason.startswith(said.removesuffix("..."))
    async with server.client() as client:
        assert (await client.get("/healthz")).status_code == 200
        assert await node_names(client) == []  # nothing was enrolled


async def test_a_hello_that_does_not_validate_is_closed_naming_the_field(
    server: LiveServer,
) -> None:
    """Negative cores: not a message of the protocol; closed (the agent retries: a newer
    agent's hello may not validate on an older server) with one line naming the field."""
    answers, code, said = await say_hello(connect_url(server), hello_frame(cpu_cores=-4))
    assert answers == [] and code == p.CLOSE_PROTOCOL_ERROR
    assert said == "bad hello: facts.cpu_cores: Input should be greater than or equal to 1"


async def test_a_real_agent_prints_the_refusal_and_stops(
    server: LiveServer, start_agent: StartAgent
) -> None:
    agent = start_agent(server.url, "bad\x01name")
    code = await trio.to_thread.run_sync(lambda: agent.proc.wait(60))
    assert code == 1
    printed = agent.log.read_text()
    assert (
        "runplane agent: bad hello: facts.name: contains the control character \\u0001\n" in printed
    )


async def _run_order(ws: trio_websocket.WebSocketConnection) -> p.Run:
    with trio.fail_after(30):
        while True:
            msg = p.decode_server(await ws.get_message())
            if isinstance(msg, p.Run):
                return msg


async def _finished_ack(ws: trio_websocket.WebSocketConnection) -> p.FinishedAck:
    with trio.fail_after(30):
        while True:
            msg = p.decode_server(await ws.get_message())
            if isinstance(msg, p.FinishedAck):
                return msg


async def test_hostile_reports_after_a_good_hello_harm_nothing(
    server: LiveServer, data_dir: Path, start_agent: StartAgent
) -> None:
    start_agent(server.url, "good", "--capability", "good-node")
    async with server.client() as client:
        async with trio_websocket.open_websocket_url(connect_url(server)) as ws:
            answers, code, _ = await say_hello_on(ws, hello_frame(capabilities=["raw-node"]))
            assert code is None and isinstance(answers[0], p.Welcome)
            job_id = await submit(
                client,
                {"stack": "shell", "command": ["x"], "requires": {"capabilities": ["raw-node"]}},
            )
            run = await _run_order(ws)
            key: dict[str, Any] = {"job_id": job_id, "attempt": run.attempt}
            for frame in _hostile_reports(key):
                await ws.send_message(frame)
            # the good reports among them are kept, cleaned
            await wait_for(
                lambda: _lines_are(client, job_id, ["a\ufffdb\tc", "after"]),
                30,
                "the cleaned log lines",
            )
            # a finish the checks refuse ends the attempt failed, and is acknowledged
            await ws.send_message(
                json.dumps(
                    {**key, "type": "job_finished", "outcome": "succeeded", "exit_code": 2**40}
                )
            )
            assert await _finished_ack(ws) == p.FinishedAck(**key)
            done = await wait_phase(client, job_id, "failed", "succeeded")
            assert done["phase"] == "failed"
            assert done["error"] == (
                "the agent's finish report was refused: "
                "exit_code: 1099511627776 is outside -2147483648 to 2147483647"
            )
            assert done["final_metrics"] == {"loss": 0.5}  # the NaN and the bad name dropped
            assert not ws.closed  # the session went on through all of it
        # another node keeps working
        other = await submit(
            client,
            {
                "stack": "shell",
                "command": ["echo", "fine"],
                "requires": {"capabilities": ["good-node"]},
            },
        )
        assert (await wait_phase(client, other, "succeeded", "failed"))["phase"] == "succeeded"
        assert await job_logs(client, other, "stdout") == ["fine"]
        assert (await client.get("/healthz")).status_code == 200
        assert set(await node_names(client)) == {"raw", "good"}
    assert texts_with_nul(data_dir) == []


async def say_hello_on(
    ws: trio_websocket.WebSocketConnection, frame: str
) -> tuple[list[p.ServerMsg], int | None, str | None]:
    await ws.send_message(frame)
    welcome = p.decode_server(await ws.get_message())
    resume = p.decode_server(await ws.get_message())
    return [welcome, resume], None, None


def _hostile_reports(key: dict[str, Any]) -> list[str]:
    """Reports of the attempt: some the checks drop, some they clean, some fine."""
    logs = {**key, "type": "job_logs"}
    metric = {**key, "type": "job_metric"}
    stream = {**key, "type": "job_stream", "stream": "cam"}
    return [
        json.dumps({**key, "type": "job_phase", "phase": "running"}),
        json.dumps({**logs, "lines": [["stdout", "a\x00b\tc"]]}),  # cleaned
        json.dumps({**logs, "lines": [["stdout", "x", "svc\x00"]]}),  # a name: dropped
        json.dumps({**logs, "job_id": key["job_id"] + "\x00", "lines": [["stdout", "y"]]}),
        json.dumps({**metric, "values": {"loss": float("nan")}}),  # NaN: json.dumps writes it
        json.dumps({**metric, "values": {"lo\x01ss": 1.0}}),
        json.dumps({**metric, "values": {"loss": 0.5}}),
        json.dumps({**stream, "chunks": [{"data": "t\x00xt", "ts": 1}]}),  # cleaned
        json.dumps(
            {**stream, "chunks": [{"data": "[" * 200 + "]" * 200, "encoding": "json", "ts": 2}]}
        ),
        '{"type": "job_logs", "lines": ' + "[" * 10_000 + "]" * 10_000 + "}",
        json.dumps({**logs, "lines": [["stdout", "z" * 100]] * 100_000}),  # > 8 MiB
        '{"type": "from_the_future", "x": ' + "{}" + "}",
        json.dumps({"type": "heartbeat", "running": [{**key, "attempt": 2**40}]}),
        json.dumps({"type": "heartbeat", "running": [key]}),
        json.dumps({**logs, "lines": [["stdout", "after"]]}),
    ]


async def _lines_are(client: httpx.AsyncClient, job_id: str, expected: list[str]) -> bool:
    return await job_logs(client, job_id, "stdout") == expected
