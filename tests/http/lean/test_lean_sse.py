"""The SSE follows' lean writer (runplane/http/lean/sse.py) answers byte for byte as
Quart's own iteration of the frames does.

One app, served by hypercorn with runplane's serving config over real sockets, on two
ports: one through the app's own ASGI stack (lanes on: the lean SSE layer writes the
frames), one through what ``create_app`` builds with ``RUNPLANE_LEAN_LANES=0`` (the
request log straight around Quart). The same job, the same ring and the same request
(with the same ``X-Request-ID``) on both: the status, the headers (but ``date``) and the
body must be the same, and so must the request log line's status and byte count. The
stream's ring is the runtime hub's, as the job's actor would leave it for a finished
job: a test publishes and closes it. HANG bounds every wait as a hang detector, never a
timing claim.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
from hypercorn.trio import serve
from quart_trio import QuartTrio

from runplane.http import serving
from runplane.http.app import create_app
from runplane.http.gate import Gate
from runplane.http.lean import LeanLanes
from runplane.http.lean import sse as lean_sse
from runplane.http.middleware import RequestLogMiddleware
from runplane.runtime import Ring
from runplane.services import streams as streams_service
from runplane.settings import load_settings
from runplane.streams.chunks import StreamChunk, ring_name

HANG = 20  # seconds: a hang detector, never a timing assertion
REQUEST_ID = "req_lean_sse_same"
STREAM = "telemetry"
KEEPALIVE = b": keepalive\n\n"


@dataclass
class Served:
    app: QuartTrio
    lean: int  # the port of the app's own stack (lanes on)
    quart: int  # the port of the stack without lanes (Quart writes the frames)
    writes: list[bool]  # one per follow whose frames the lean writer wrote
    stop: trio.Event  # set: the server shuts down


@pytest.fixture
async def served(
    nursery: trio.Nursery, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Served]:
    settings = load_settings(
        {
            "RUNPLANE_DATA_DIR": str(tmp_path / "data"),
            "RUNPLANE_LOCAL_AGENT": "0",
            "RUNPLANE_ADMIN_TOKEN": "lean-sse-admin-token-0123456789",
        }
    )
    assert settings.lean_lanes
    app = create_app(settings)
    # create_app's stack with RUNPLANE_LEAN_LANES=0: the request log around what the
    # lanes would wrap (Quart's app, and the artifact routes' body flow)
    lanes = app.asgi_app.app
    assert isinstance(lanes, LeanLanes)
    without = RequestLogMiddleware(lanes.app)
    off = load_settings({"RUNPLANE_DATA_DIR": str(tmp_path / "off"), "RUNPLANE_LEAN_LANES": "0"})
    stack = create_app(off).asgi_app
    assert isinstance(stack, RequestLogMiddleware) and type(stack.app) is type(lanes.app)
    ports: dict[str, int] = {}

    async def both(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan" and scope["server"][1] == ports.get("quart"):
            await without(scope, receive, send)
        else:
            await app(scope, receive, send)

    config = serving.Config()
    config.bind = ["127.0.0.1:0", "127.0.0.1:0"]
    config.accesslog = None
    config.graceful_timeout = 1
    stop = trio.Event()
    binds = await nursery.start(partial(serve, both, config, shutdown_trigger=stop.wait))
    lean, quart = (int(bind.rsplit(":", 1)[1]) for bind in binds)
    ports["quart"] = quart
    writes: list[bool] = []
    write = lean_sse.write

    async def counted(frames: Any, receive: Any, tally: Any) -> None:
        writes.append(True)
        await write(frames, receive, tally)

    monkeypatch.setattr(lean_sse, "write", counted)  # a spy: the lean lane really wrote
    yield Served(app, lean, quart, writes, stop)
    stop.set()


@dataclass
class Answer:
    status: int
    headers: list[tuple[str, str]]
    body: bytes
    ended: bool = True  # the body's end came (a chunked body's last chunk)

    def same_as(self, other: Answer) -> bool:
        def kept(a: Answer) -> tuple[Any, ...]:
            return (a.status, [h for h in a.headers if h[0] != "date"], a.body, a.ended)

        return kept(self) == kept(other)


async def get(
    port: int,
    target: str,
    *,
    seen: trio.Event | None = None,
    leave: bool = False,
    version: str = "1.1",
) -> Answer:
    """GET ``target`` on a fresh connection and read the answer to its end (the server
    closes: ``Connection: close``). ``seen`` is set once a body byte came; ``leave``
    closes the connection right then instead (the client goes)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    request = (
        f"GET {target} HTTP/{version}\r\nHost: t\r\nX-Request-ID: {REQUEST_ID}\r\n"
        "Connection: close\r\n\r\n"
    )
    raw = b""
    async with stream:
        await stream.send_all(request.encode())
        while chunk := await stream.receive_some(65536):
            raw += chunk
            head_end = raw.find(b"\r\n\r\n")
            if seen is not None and head_end >= 0 and len(raw) > head_end + 4:
                seen.set()
                if leave:
                    break
    return parse(raw)


def parse(raw: bytes) -> Answer:
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = [(n.lower(), v) for n, _, v in (line.partition(": ") for line in lines[1:])]
    if ("transfer-encoding", "chunked") not in headers:
        return Answer(int(lines[0].split()[1]), headers, rest)
    body, ended = b"", False
    while rest and not ended:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        ended = size == 0
        body, rest = body + rest[:size], rest[size + 2 :]
    return Answer(int(lines[0].split()[1]), headers, body, ended)


async def until(check: Callable[[], Any]) -> None:
    """Poll ``check`` (a plain or an async predicate) until it holds, within HANG."""
    with trio.fail_after(HANG):
        while True:
            held = check()
            if await held if inspect.isawaitable(held) else held:
                return
            await trio.sleep(0.01)


async def both_lanes(served: Served, target: str, version: str = "1.1") -> tuple[Answer, Answer]:
    answers: dict[int, Answer] = {}

    async def one(port: int) -> None:
        answers[port] = await get(port, target, version=version)

    with trio.fail_after(HANG):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, served.lean)
            nursery.start_soon(one, served.quart)
    return answers[served.lean], answers[served.quart]


async def finished_job(app: QuartTrio) -> str:
    """A cancelled job with a stream: its follow reads the hub's ring (no actor's)."""
    client = app.test_client()
    submitted = await client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})
    job_id = str((await submitted.get_json())["job_id"])
    assert (await client.post(f"/v1/jobs/{job_id}/cancel")).status_code < 300

    async def cancelled() -> bool:
        view = await (await client.get(f"/v1/jobs/{job_id}")).get_json()
        return bool(view["phase"] == "cancelled")

    await until(cancelled)
    saved = json.dumps({STREAM: {"kind": "data", "count": 0, "last_seq": 0}})
    store = app.extensions["runplane"].store
    await store.execute("UPDATE jobs SET streams = ? WHERE id = ?", (saved, job_id))
    return job_id


def ring_of(app: QuartTrio, job_id: str, capacity: int = 64) -> Ring[StreamChunk]:
    hub = app.extensions["runplane"].root.streams.hub
    ring: Ring[StreamChunk] = hub.ring(ring_name(job_id, STREAM), capacity=capacity)
    return ring


def publish(ring: Ring[StreamChunk], *values: int) -> None:
    for value in values:
        seq = ring.last_seq + 1
        ring.publish(StreamChunk(seq, STREAM, "data", "json", 1_000 + seq, json.dumps(value)))


def frames(answer: Answer) -> list[bytes]:
    """The ``data:`` lines of the answer's events."""
    return [line for line in answer.body.split(b"\n") if line.startswith(b"data: ")]


def data_path(job_id: str, query: str = "") -> str:
    return f"/v1/jobs/{job_id}/streams/{STREAM}/data{query}"


def log_lines(caplog: pytest.LogCaptureFixture, path: str) -> list[dict[str, Any]]:
    return [
        r.__dict__
        for r in caplog.records
        if r.name == "runplane.http" and r.msg == "request" and r.__dict__["path"] == path
    ]


async def test_a_finished_streams_replay_and_since_seq_are_the_same_on_both_lanes(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = await finished_job(served.app)
    ring = ring_of(served.app, job_id)
    publish(ring, *range(1, 8))
    ring.close()
    with caplog.at_level(logging.INFO, logger="runplane.http"):
        lean, quart = await both_lanes(served, data_path(job_id))
    assert lean.status == 200 and lean.same_as(quart), (lean, quart)
    assert ("content-type", "text/event-stream") in lean.headers
    assert ("x-request-id", REQUEST_ID) in lean.headers
    assert not any("lean" in name for name, _ in lean.headers)  # the marker is internal
    assert lean.body.count(b"event: stream\n") == 7
    assert served.writes == [True]  # Quart wrote the other one
    lines = log_lines(caplog, data_path(job_id))
    assert sorted((line["status"], line["bytes"]) for line in lines) == [(200, len(lean.body))] * 2
    since = data_path(job_id, "?since_seq=4")
    lean, quart = await both_lanes(served, since)
    assert lean.same_as(quart) and lean.body.startswith(b"id: 5\n")


async def test_a_live_tail_is_the_same_on_both_lanes(served: Served) -> None:
    job_id = await finished_job(served.app)
    ring = ring_of(served.app, job_id)
    publish(ring, 1, 2)
    answers: list[Answer] = []

    async def follow(port: int) -> None:
        answers.append(await get(port, data_path(job_id)))

    with trio.fail_after(HANG):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow, served.lean)
            nursery.start_soon(follow, served.quart)
            await until(lambda: ring.subscribers == 2)
            for burst in range(5):
                publish(ring, *range(10 * burst, 10 * burst + 3))
                await trio.sleep(0.01)
            ring.close()
    lean, quart = answers
    assert lean.same_as(quart), (lean, quart)
    assert lean.body.count(b"event: stream\n") == 17
    assert served.writes == [True]


async def test_a_lagged_marker_is_the_same_on_both_lanes(served: Served) -> None:
    job_id = await finished_job(served.app)
    ring = ring_of(served.app, job_id, capacity=4)
    publish(ring, *range(10))
    ring.close()
    lean, quart = await both_lanes(served, data_path(job_id, "?since_seq=1"))
    assert lean.same_as(quart)
    assert lean.body.startswith(b'event: lagged\ndata: {"dropped":5,"resume_seq":7}\n\n')


async def test_a_refused_ticket_is_quarts_problem_on_both_lanes(served: Served) -> None:
    job_id = await finished_job(served.app)
    lean, quart = await both_lanes(served, data_path(job_id, "?ticket=rpst_nope.nope"))
    assert lean.status == 401 and lean.same_as(quart)
    assert served.writes == []  # a problem is Quart's, whole
    assert json.loads(lean.body)["type"].endswith("unauthorized")


async def follow_both(
    served: Served, job_id: str, cut: Callable[[], object]
) -> tuple[Answer, Answer]:
    """Follow ``job_id``'s stream on both lanes at once; once both answers have started,
    ``cut()`` ends them. The (lean, quart) answers."""
    seen = {served.lean: trio.Event(), served.quart: trio.Event()}
    answers: dict[int, Answer] = {}

    async def follow(port: int) -> None:
        answers[port] = await get(port, data_path(job_id), seen=seen[port])

    async with trio.open_nursery() as nursery:
        for port in seen:
            nursery.start_soon(follow, port)
        for event in seen.values():
            await event.wait()
        cut()
    return answers[served.lean], answers[served.quart]


async def test_the_keepalive_is_the_same_on_both_lanes(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streams_service, "IDLE_SEC", 0.05)
    job_id = await finished_job(served.app)
    ring = ring_of(served.app, job_id)
    with trio.fail_after(HANG):
        lean, quart = await follow_both(served, job_id, ring.close)
    for answer in (lean, quart):  # how many keepalives each got is the clock's business
        assert answer.body and answer.body == KEEPALIVE * (len(answer.body) // len(KEEPALIVE))
    assert lean.same_as(Answer(quart.status, quart.headers, lean.body))


async def test_the_job_events_follow_is_the_same_on_both_lanes(
    served: Served, caplog: pytest.LogCaptureFixture
) -> None:
    job_id = await finished_job(served.app)
    with caplog.at_level(logging.INFO, logger="runplane.http"):
        lean, quart = await both_lanes(served, f"/v1/jobs/{job_id}/events")
    assert lean.status == 200 and lean.same_as(quart)
    assert b"event: phase\n" in lean.body
    assert served.writes == [True]
    lines = log_lines(caplog, f"/v1/jobs/{job_id}/events")
    assert sorted((line["status"], line["bytes"]) for line in lines) == [(200, len(lean.body))] * 2


@pytest.mark.parametrize("lane", ["lean", "quart"])
async def test_a_client_that_leaves_mid_follow_frees_its_cursor(
    served: Served, caplog: pytest.LogCaptureFixture, lane: str
) -> None:
    job_id = await finished_job(served.app)
    ring = ring_of(served.app, job_id)
    publish(ring, 1, 2, 3)
    port = served.lean if lane == "lean" else served.quart
    with caplog.at_level(logging.INFO, logger="runplane.http"), trio.fail_after(HANG):
        seen = trio.Event()
        answer = await get(port, data_path(job_id), seen=seen, leave=True)
        assert answer.status == 200 and seen.is_set()
        await until(lambda: ring.subscribers == 0)  # the server saw it go: cursor closed
        await until(lambda: bool(log_lines(caplog, data_path(job_id))))
    [line] = log_lines(caplog, data_path(job_id))
    assert line["status"] == 200 and line["client_gone"] is True and line["bytes"] > 0
    assert served.writes == ([True] if lane == "lean" else [])


async def test_an_http_1_0_follow_is_the_same_on_both_lanes(served: Served) -> None:
    """HTTP/1.0: no chunked encoding (the body ends with the connection), so the writer
    below hypercorn's send steps aside and the frames go through hypercorn's send."""
    job_id = await finished_job(served.app)
    ring = ring_of(served.app, job_id)
    publish(ring, 1, 2, 3)
    ring.close()
    lean, quart = await both_lanes(served, data_path(job_id), version="1.0")
    assert lean.status == 200 and lean.same_as(quart)
    assert ("transfer-encoding", "chunked") not in lean.headers
    assert lean.body.count(b"event: stream\n") == 3 and served.writes == [True]


async def test_a_burst_bigger_than_the_socket_takes_arrives_whole_on_both_lanes(
    served: Served,
) -> None:
    """8 MiB ready at once: one write the kernel cannot take whole, so the rest goes
    through hypercorn's send (its lock, waiting for room), in order."""
    job_id = await finished_job(served.app)
    ring = ring_of(served.app, job_id)
    answers: dict[int, Answer] = {}

    async def follow(port: int) -> None:
        answers[port] = await get(port, data_path(job_id))

    with trio.fail_after(HANG):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(follow, served.lean)
            nursery.start_soon(follow, served.quart)
            await until(lambda: ring.subscribers == 2)
            for n in range(64):
                seq = ring.last_seq + 1
                data = json.dumps({"n": n, "pad": "x" * 128 * 1024})
                ring.publish(StreamChunk(seq, STREAM, "data", "json", seq, data))
            ring.close()
    lean, quart = answers[served.lean], answers[served.quart]
    assert len(lean.body) > 8 * 1024 * 1024 and lean.same_as(quart)
    assert [json.loads(json.loads(frame[6:])["data"])["n"] for frame in frames(lean)] == list(
        range(64)
    )


async def test_a_shutdown_ends_an_open_follow_and_frees_its_cursor(served: Served) -> None:
    job_id = await finished_job(served.app)
    ring = ring_of(served.app, job_id)
    publish(ring, 1)
    with trio.fail_after(HANG):
        # the follows are cut by the shutdown (the ring stays open)
        lean, quart = await follow_both(served, job_id, served.stop.set)
        await until(lambda: ring.subscribers == 0)
    assert lean.body == quart.body
    assert lean.body.startswith(b"id: 1\n") and served.writes == [True]


@pytest.mark.parametrize("lane", ["lean", "quart"])
async def test_an_ha_step_down_cuts_an_open_follow_and_frees_its_cursor(
    nursery: trio.Nursery, tmp_path: Path, lane: str
) -> None:
    """A replica that loses its lease cuts every exchange with its app (the gate's cancel
    scope): the follow ends short (no last chunk) and its cursor is freed, on either
    lane. Behind the gate the frames go through its ``send`` (never below it)."""
    settings = load_settings(
        {"RUNPLANE_DATA_DIR": str(tmp_path / "data"), "RUNPLANE_LOCAL_AGENT": "0"}
    )
    app = create_app(settings)
    lanes = app.asgi_app.app
    assert isinstance(lanes, LeanLanes)
    gate = Gate(
        app if lane == "lean" else RequestLogMiddleware(lanes.app),
        status=dict,
        leader=lambda: None,
    )
    gate.leading = True
    config = serving.Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    stop = trio.Event()
    async with app.test_app():  # the app's lifespan (a replica's runs it under the gate)
        binds = await nursery.start(partial(serve, gate, config, shutdown_trigger=stop.wait))
        port = int(binds[0].rsplit(":", 1)[1])
        job_id = await finished_job(app)
        ring = ring_of(app, job_id)
        publish(ring, 1)
        seen = trio.Event()
        answers: list[Answer] = []

        async def follow() -> None:
            answers.append(await get(port, data_path(job_id), seen=seen))

        with trio.fail_after(HANG):
            async with trio.open_nursery() as inner:
                inner.start_soon(follow)
                await seen.wait()
                gate.step_down()
            await until(lambda: ring.subscribers == 0)
        stop.set()
    await gate.aclose()
    [answer] = answers
    assert answer.status == 200 and answer.body.startswith(b"id: 1\n") and not answer.ended


async def test_every_follower_writes_the_chunks_own_bytes(served: Served) -> None:
    """A chunk is encoded once: each follower's write of it is the same bytes object."""
    job_id = await finished_job(served.app)
    ring = ring_of(served.app, job_id)
    streams = served.app.extensions["runplane"].root.streams
    follows = [streams.follow(job_id, STREAM, None) for _ in range(3)]
    got: list[bytes] = []

    async def first(follow: Any) -> None:
        got.append(await follow.__anext__())

    with trio.fail_after(HANG):
        async with trio.open_nursery() as nursery:
            for follow in follows:
                nursery.start_soon(first, follow)
            await until(lambda: ring.subscribers == 3)
            publish(ring, 1)
    chunk = ring.retained()[0][1]
    assert len(got) == 3 and all(frame is chunk.frame for frame in got)
    for follow in follows:
        await follow.aclose()
    assert ring.subscribers == 0


async def test_the_connection_serves_the_next_request_after_a_lean_follow(served: Served) -> None:
    """The chunks went below hypercorn and h11, the body's end through them: h11 is in
    step, and the keep-alive connection answers its next request."""
    job_id = await finished_job(served.app)
    ring = ring_of(served.app, job_id)
    publish(ring, 1, 2)
    ring.close()
    stream = await trio.open_tcp_stream("127.0.0.1", served.lean)
    raw = b""
    with trio.fail_after(HANG):
        async with stream:
            await stream.send_all(f"GET {data_path(job_id)} HTTP/1.1\r\nHost: t\r\n\r\n".encode())
            while not raw.endswith(b"\r\n0\r\n\r\n"):
                raw += await stream.receive_some(65536)
            await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
            after = b""
            while chunk := await stream.receive_some(65536):
                after += chunk
    assert parse(raw).body.count(b"event: stream\n") == 2 and served.writes == [True]
    assert after.startswith(b"HTTP/1.1 200 ")
