"""Realtime streams and teleop, end to end: a real server on a loopback port, a real agent
process, a real job that publishes a stream and echoes the teleop frames it reads back
onto it. A ticketed subscriber sees the replay then the live tail; Last-Event-ID resumes
without a loss; a subscriber behind the ring gets the lagged marker; teleop frames land in
the pod's ``.teleop`` file in order; bad tickets are 401 (the clock driven in-process);
409 after the job ended, 502 with the agent killed, 413 past 256 KiB; the recording
survives a server restart."""

from __future__ import annotations

import json
import textwrap
from collections.abc import AsyncIterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from runplane.http.routes import streams as stream_routes

from .conftest import (
    LiveServer,
    StartAgent,
    e2e_settings,
    job,
    online_nodes,
    start_server,
    submit,
    wait_for,
    wait_phase,
)

#: The pod: five chunks at once, then each teleop frame of stream "telemetry" echoed back
#: onto it; a frame {"stop": true} ends the job.
ECHO = textwrap.dedent(
    """
    import json, os, sys, time
    d = os.environ["RUNPLANE_STREAMS_DIR"]
    out = open(os.path.join(d, "telemetry"), "a", buffering=1)
    for i in range(1, int(os.environ.get("FIRST", "5")) + 1):
        out.write(json.dumps({"i": i}) + "\\n")
    path, pos, buf = os.path.join(d, "telemetry.teleop"), 0, ""
    while True:
        try:
            with open(path) as f:
                f.seek(pos)
                data = f.read()
                pos = f.tell()
        except FileNotFoundError:
            data = ""
        buf += data
        while "\\n" in buf:
            line, buf = buf.split("\\n", 1)
            rec = json.loads(line)
            out.write(json.dumps({"echo": rec["frame"], "teleop_seq": rec["seq"]}) + "\\n")
            if rec["frame"].get("stop"):
                sys.exit(0)
        time.sleep(0.005)
    """
)


def _body(**env: str) -> dict[str, Any]:
    return {"stack": "shell", "command": ["python3", "-c", ECHO], "env": env}


async def _stream_count(client: httpx.AsyncClient, job_id: str, name: str) -> int:
    views = (await client.get(f"/v1/jobs/{job_id}/streams")).json()
    return next((v["count"] for v in views if v["name"] == name), 0)


async def _subscribe(client: httpx.AsyncClient, job_id: str, name: str) -> dict[str, Any]:
    response = await client.post(f"/v1/jobs/{job_id}/streams/{name}/subscribe")
    assert response.status_code == 200, response.text
    return response.json()


Event = tuple[str, dict[str, Any], str | None]


async def _events(
    client: httpx.AsyncClient,
    url: str,
    want: int,
    headers: dict[str, str] | None = None,
    sink: list[Event] | None = None,
) -> list[Event]:
    """The first ``want`` (event, data, id) of an SSE stream (keepalives skipped), also
    appended to ``sink`` as they come."""
    got: list[Event] = [] if sink is None else sink
    with trio.fail_after(30):
        async with client.stream("GET", url, headers=headers) as response:
            assert response.status_code == 200, await response.aread()
            event, data, ident = "message", "", None
            async for line in response.aiter_lines():
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    data = line[6:]
                elif line.startswith("id: "):
                    ident = line[4:]
                elif line == "" and data:
                    got.append((event, json.loads(data), ident))
                    event, data, ident = "message", "", None
                    if len(got) >= want:
                        return got
    return got


async def _teleop(
    client: httpx.AsyncClient, job_id: str, ticket: str, frame: Any, name: str = "telemetry"
) -> httpx.Response:
    return await client.post(
        f"/v1/jobs/{job_id}/streams/{name}/teleop",
        json=frame,
        headers={"Authorization": f"Bearer {ticket}"},
    )


@pytest.fixture
async def echo_job(
    server: LiveServer, start_agent: StartAgent, work_dir: Path
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    start_agent(server.url, "pod", "--work-dir", str(work_dir))
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        job_id = await submit(client, _body())
        await wait_phase(client, job_id, "running")

        async def five() -> bool:
            return await _stream_count(client, job_id, "telemetry") >= 5

        await wait_for(five, 30, "the first five chunks")
        yield client, job_id


async def test_replay_then_live_teleop_in_order_and_resume(
    echo_job: tuple[httpx.AsyncClient, str], work_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, job_id = echo_job
    views = (await client.get(f"/v1/jobs/{job_id}/streams")).json()
    assert views == [
        {
            "name": "telemetry",
            "kind": "data",  # opened at run time: a data stream
            "enabled": True,
            "transport": "sse",
            "fps": 0,
            "width": 0,
            "height": 0,
            "subscribable": True,
            "count": 5,
        }
    ]
    sub = await _subscribe(client, job_id, "telemetry")
    assert sub["session_id"].startswith("sub_") and sub["transport"] == "sse"
    assert sub["url"].endswith(f"/v1/jobs/{job_id}/streams/telemetry/data?ticket={sub['ticket']}")

    seen: list[Event] = []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(partial(_events, client, sub["url"], 8, sink=seen))
        await wait_for(partial(_at_least, seen, 5), 30, "the replay")  # then live
        for n in range(1, 4):
            response = await _teleop(client, job_id, sub["ticket"], {"push": n})
            assert response.status_code == 202, response.text
            assert response.json() == {"delivered": True, "stream": "telemetry", "seq": n}
    assert [e for e, _, _ in seen] == ["stream"] * 8
    chunks = [d for _, d, _ in seen]
    assert [c["seq"] for c in chunks] == list(range(1, 9))
    assert [json.loads(c["data"]) for c in chunks[:5]] == [{"i": i} for i in range(1, 6)]
    assert [json.loads(c["data"]) for c in chunks[5:]] == [
        {"echo": {"push": n}, "teleop_seq": n} for n in range(1, 4)
    ]
    assert all(c["encoding"] == "json" and c["stream"] == "telemetry" for c in chunks)
    assert [i for _, _, i in seen] == [str(n) for n in range(1, 9)]
    # the frames are in the pod's .teleop file, in order, in the documented form
    teleop_file = work_dir / job_id / "1.streams" / "telemetry.teleop"
    lines = [json.loads(x) for x in teleop_file.read_text().splitlines()]
    assert [(x["seq"], x["frame"]) for x in lines] == [(n, {"push": n}) for n in range(1, 4)]
    # resume after seq 6 with Last-Event-ID: 7 and 8, nothing lost
    resumed = await _events(client, sub["url"], 2, headers={"Last-Event-ID": "6"})
    assert [d["seq"] for _, d, _ in resumed] == [7, 8]
    # the same ticket opens the data as ?ticket= and as the bearer
    bearer = await _events(
        client,
        f"/v1/jobs/{job_id}/streams/telemetry/data",
        1,
        headers={"Authorization": f"Bearer {sub['ticket']}", "Last-Event-ID": "7"},
    )
    assert [d["seq"] for _, d, _ in bearer] == [8]

    # bad tickets: tampered, for another stream, expired (the clock moved in-process)
    tampered = sub["ticket"][:-2] + ("AA" if not sub["ticket"].endswith("AA") else "BB")
    assert (await _teleop(client, job_id, tampered, {"x": 1})).status_code == 401
    data = await client.get(f"/v1/jobs/{job_id}/streams/telemetry/data?ticket={tampered}")
    assert data.status_code == 401
    assert data.headers["content-type"].startswith("application/problem+json")
    other = await client.get(f"/v1/jobs/{job_id}/streams/other/data?ticket={sub['ticket']}")
    assert other.status_code == 401
    assert "another job or stream" in other.json()["detail"]
    wrong_job = await _teleop(client, "job_01aaaaaaaaaaaaaaaaaaaaaaaa", sub["ticket"], {"x": 1})
    assert wrong_job.status_code == 401
    assert (
        await client.post(f"/v1/jobs/{job_id}/streams/telemetry/teleop", json={})
    ).status_code == 401
    real_now = stream_routes._now
    monkeypatch.setattr(stream_routes, "_now", lambda: real_now() + 61)
    expired = await _teleop(client, job_id, sub["ticket"], {"x": 1})
    assert expired.status_code == 401 and "expired" in expired.json()["detail"]
    monkeypatch.setattr(stream_routes, "_now", real_now)

    # 413 past 256 KiB (the frame is not sent)
    big = await _teleop(client, job_id, sub["ticket"], {"pad": "x" * (256 * 1024)})
    assert big.status_code == 413
    # stop: the job ends; a frame after that is 409
    assert (await _teleop(client, job_id, sub["ticket"], {"stop": True})).status_code == 202
    view = await wait_phase(client, job_id, "succeeded", "failed", within=30)
    assert view["phase"] == "succeeded", view
    late = await _teleop(client, job_id, sub["ticket"], {"x": 1})
    assert late.status_code == 409
    assert late.json()["code"] == "not_live"
    # the finished job's data: what is retained, then the stream ends
    tail = await _events(client, sub["url"], 100)
    assert [d["seq"] for _, d, _ in tail] == list(range(1, 10))


async def _at_least(items: list[Event], n: int) -> bool:
    return len(items) >= n


async def test_a_subscriber_behind_the_ring_gets_the_lagged_marker(
    nursery: trio.Nursery, data_dir: Path, start_agent: StartAgent, work_dir: Path
) -> None:
    live = await start_server(nursery, e2e_settings(data_dir, stream_ring="16"), heartbeat_sec=0.5)
    try:
        start_agent(live.url, "pod", "--work-dir", str(work_dir))
        async with live.client() as client:
            await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
            job_id = await submit(client, _body(FIRST="100"))

            async def hundred() -> bool:
                return await _stream_count(client, job_id, "telemetry") >= 100

            await wait_for(hundred, 30, "100 chunks")
            sub = await _subscribe(client, job_id, "telemetry")
            got = await _events(client, sub["url"], 17, headers={"Last-Event-ID": "0"})
            assert got[0][0] == "lagged"
            assert got[0][1] == {"dropped": 84, "resume_seq": 85}
            assert [d["seq"] for _, d, _ in got[1:]] == list(range(85, 101))
            # a new subscriber (no Last-Event-ID) gets what is retained, no marker
            fresh = await _events(client, sub["url"], 16)
            assert [e for e, _, _ in fresh] == ["stream"] * 16
            assert fresh[0][1]["seq"] == 85
            await _teleop(client, job_id, sub["ticket"], {"stop": True})
            await wait_phase(client, job_id, "succeeded", "failed", within=30)
    finally:
        live.stop.set()
        await live.done.wait()


async def test_teleop_with_the_agent_killed_is_502(
    server: LiveServer, start_agent: StartAgent, work_dir: Path
) -> None:
    agent = start_agent(server.url, "pod", "--work-dir", str(work_dir))
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        job_id = await submit(client, _body())
        await wait_phase(client, job_id, "running")

        async def opened() -> bool:
            return await _stream_count(client, job_id, "telemetry") >= 1

        await wait_for(opened, 30, "the stream")
        sub = await _subscribe(client, job_id, "telemetry")
        assert (await _teleop(client, job_id, sub["ticket"], {"push": 1})).status_code == 202
        agent.kill()
        response = await _teleop(client, job_id, sub["ticket"], {"push": 2})
        assert response.status_code == 502, response.text
        assert response.json()["code"] == "teleop_undelivered"
        assert (await job(client, job_id))["phase"] == "running"  # until the node is lost


async def test_the_recording_survives_a_restart(
    nursery: trio.Nursery, data_dir: Path, start_agent: StartAgent, work_dir: Path
) -> None:
    first = await start_server(nursery, e2e_settings(data_dir), heartbeat_sec=0.5)
    start_agent(first.url, "pod", "--work-dir", str(work_dir))
    async with first.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        job_id = await submit(client, _body(FIRST="3"))

        async def three() -> bool:
            return await _stream_count(client, job_id, "telemetry") >= 3

        await wait_for(three, 30, "three chunks")
        sub = await _subscribe(client, job_id, "telemetry")
        assert (await _teleop(client, job_id, sub["ticket"], {"stop": True})).status_code == 202
        await wait_phase(client, job_id, "succeeded", within=30)
        before = (await client.get(f"/v1/jobs/{job_id}/recording")).json()
    first.stop.set()
    await first.done.wait()
    again = await start_server(nursery, e2e_settings(data_dir), heartbeat_sec=0.5)
    try:
        async with again.client() as client:
            after = (await client.get(f"/v1/jobs/{job_id}/recording")).json()
            replay = await _events(
                client, f"/v1/jobs/{job_id}/streams/telemetry/data", 10, headers=None
            )
    finally:
        again.stop.set()
        await again.done.wait()
    assert after == before
    assert after["phase"] == "succeeded"
    assert after["streams"] == [{"name": "telemetry", "kind": "data", "count": 4}]
    assert [p["seq"] for p in after["stream_points"]] == [1, 2, 3, 4]
    assert after["truncated"] == {"stream_points": False}
    assert all(isinstance(x["ts"], int) for x in after["logs"] + after["stream_points"])
    assert after["started_at"] <= after["ended_at"]
    assert [d["seq"] for _, d, _ in replay] == [1, 2, 3, 4]
