"""Sessions over real sockets with a real agent process running the pod: start order
behind a health gate, ready, keepalive past the TTL, the reaper, DELETE freeing the quota,
a crashing service, teleop into the pod, and a server restart keeping the deadline."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import httpx
import trio

from .conftest import (
    ADMIN,
    LiveServer,
    StartAgent,
    e2e_settings,
    job_logs,
    online_nodes,
    start_server,
    wait_for,
)
from .test_jobs_e2e import _processes_with
from .test_streams_e2e import _events

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}


async def agent_up(url: str, start_agent: StartAgent) -> None:
    start_agent(url, "pods", "--max-concurrency", "4")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")


async def create(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/sessions", json=body)
    assert response.status_code == 202, response.text
    return dict(response.json())


async def phase(
    client: httpx.AsyncClient, session_id: str, *phases: str, within: float = 60
) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        view = (await client.get(f"/v1/sessions/{session_id}")).json()
        return view if view["phase"] in phases else None

    return dict(await wait_for(check, within, f"session {session_id} to be {phases}"))


def pod(marker: str, ttl: int = 300, **extra: Any) -> dict[str, Any]:
    """sim writes sim.ready half a second after it starts (its health gate waits for it);
    ctrl needs sim and reports when it started and when sim was ready."""
    return {
        "name": "sim+ctrl",
        "idle_ttl_sec": ttl,
        "pod": {
            "services": [
                {
                    "name": "sim",
                    "command": [
                        "sh",
                        "-c",
                        f"sleep 0.5; date +%s.%N > sim.ready; exec sleep {marker}",
                    ],
                    "health": {"command": ["test", "-f", "sim.ready"], "period_sec": 1},
                },
                {
                    "name": "ctrl",
                    "needs": ["sim"],
                    "command": [
                        "sh",
                        "-c",
                        'echo "ctrl-start $(date +%s.%N) sim-ready $(cat sim.ready)"'
                        f"; exec sleep {marker}",
                    ],
                },
            ]
        },
        **extra,
    }


async def test_a_service_starts_after_the_one_it_needs_is_healthy_and_delete_tears_down(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await agent_up(server.url, start_agent)
    marker = f"{800 + random.random():.6f}"
    async with server.client() as client:
        created = await create(client, pod(marker))
        view = await phase(client, created["id"], "ready", "failed")
        assert view["phase"] == "ready", view
        assert view["started_at"] and view["error"] == ""

        async def ctrl_line() -> list[str]:
            return [
                line
                for line in await job_logs(client, created["job_id"], "stdout")
                if line.startswith("ctrl-start")
            ]

        line = (await wait_for(ctrl_line, 30, "ctrl's first line"))[0]
        _, ctrl_start, _, sim_ready = line.split()
        assert float(ctrl_start) >= float(sim_ready)  # ctrl only once sim's gate passed
        logs = (await client.get(f"/v1/jobs/{created['job_id']}/logs")).json()["logs"]
        tagged = [e for e in logs if e.get("service") == "ctrl"]
        assert tagged and tagged[0]["line"].startswith("ctrl-start")
        system = [e["line"] for e in logs if e["stream"] == "system"]
        up = next(i for i, t in enumerate(system) if t.startswith("service sim is up"))
        runs = next(i for i, t in enumerate(system) if t.startswith("service ctrl: running"))
        assert up < runs
        assert len(_processes_with(marker)) >= 2
        stopped = (await client.delete(f"/v1/sessions/{created['id']}")).json()
        assert stopped["phase"] == "stopped"

        async def gone() -> bool:
            return not _processes_with(marker)

        await wait_for(gone, 30, "every service of the pod to be gone")


async def test_keepalive_keeps_a_session_past_its_ttl_and_silence_reaps_it(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await agent_up(server.url, start_agent)
    marker = f"{810 + random.random():.6f}"
    async with server.client() as client:
        created = await create(client, pod(marker, ttl=3))
        sid = created["id"]
        await phase(client, sid, "ready")
        for _ in range(6):  # 6 s: twice the ttl
            await trio.sleep(1)
            kept = await client.post(f"/v1/sessions/{sid}/keepalive")
            assert kept.status_code == 200, kept.text
            assert kept.json()["phase"] == "ready"
        view = await phase(client, sid, "stopped", within=30)
        assert view["error"].startswith("reaped: no keepalive for 3 s"), view

        async def gone() -> bool:
            return not _processes_with(marker)

        await wait_for(gone, 30, "the reaped pod's processes to be gone")
        assert (await client.post(f"/v1/sessions/{sid}/keepalive")).status_code == 409


async def test_delete_frees_the_quota_slot_a_submit_was_refused_for(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await agent_up(server.url, start_agent)
    marker = f"{820 + random.random():.6f}"
    async with server.client() as client:
        put = await client.put(
            "/v1/policy", json={"org": {"max_concurrent_org": 1}}, headers=ADMIN_H
        )
        assert put.status_code == 200, put.text
        created = await create(client, pod(marker))
        await phase(client, created["id"], "ready")
        refused = await client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})
        assert refused.status_code == 429
        assert (await client.delete(f"/v1/sessions/{created['id']}")).json()["phase"] == "stopped"
        passed = await client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})
        assert passed.status_code == 202, passed.text


async def test_a_crashing_service_fails_the_session_naming_it(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await agent_up(server.url, start_agent)
    marker = f"{830 + random.random():.6f}"
    body = {
        "pod": {
            "services": [
                {"name": "steady", "command": ["sleep", marker]},
                {"name": "flaky", "needs": ["steady"], "command": ["sh", "-c", "sleep 1; exit 7"]},
            ]
        }
    }
    async with server.client() as client:
        created = await create(client, body)
        view = await phase(client, created["id"], "failed", "stopped", within=60)
        assert view["phase"] == "failed"
        assert view["error"] == "service 'flaky' exited (exit code 7)"

        async def gone() -> bool:
            return not _processes_with(marker)

        await wait_for(gone, 30, "the other service to be stopped")


async def test_teleop_frames_reach_the_pod(server: LiveServer, start_agent: StartAgent) -> None:
    await agent_up(server.url, start_agent)
    script = (
        'echo \'{"hello": 1}\' >> "$RUNPLANE_STREAMS_DIR/control"; '
        'touch "$RUNPLANE_STREAMS_DIR/control.teleop"; '
        'exec tail -n +1 -f "$RUNPLANE_STREAMS_DIR/control.teleop"'
    )
    body = {"pod": {"services": [{"name": "driver", "command": ["sh", "-c", script]}]}}
    async with server.client() as client:
        created = await create(client, body)
        assert created["teleop_stream"] == "control"
        await phase(client, created["id"], "ready")
        job_id = created["job_id"]

        async def opened() -> bool:
            streams = (await client.get(f"/v1/jobs/{job_id}/streams")).json()
            return any(s["name"] == "control" for s in streams)

        await wait_for(opened, 30, "the pod to open its control stream")
        ticket = (await client.post(f"/v1/jobs/{job_id}/streams/control/subscribe", json={})).json()
        sent = await client.post(
            f"/v1/jobs/{job_id}/streams/control/teleop?ticket={ticket['ticket']}",
            json={"throttle": 0.5},
        )
        assert sent.status_code == 202, sent.text

        async def echoed() -> list[str]:
            lines = await job_logs(client, job_id, "stdout")
            return [line for line in lines if "throttle" in line]

        line = (await wait_for(echoed, 30, "the frame in the pod's output"))[0]
        assert json.loads(line)["frame"] == {"throttle": 0.5}
        await client.delete(f"/v1/sessions/{created['id']}")


#: A pod that writes nothing to its streams until a teleop frame comes: then it appends
#: the frame's line to its control stream (its first chunk).
ECHO = (
    'touch "$RUNPLANE_STREAMS_DIR/control.teleop"; '
    'tail -n +1 -f "$RUNPLANE_STREAMS_DIR/control.teleop" | while IFS= read -r line; do '
    'printf "%s\\n" "$line" >> "$RUNPLANE_STREAMS_DIR/control"; done'
)


async def test_the_teleop_stream_is_there_before_the_pod_writes_to_it(
    server: LiveServer, start_agent: StartAgent
) -> None:
    """The session's teleop stream is listed and subscribable from the session's start,
    and takes teleop (202) once the pod runs, although the pod has written no chunk; a
    follower that subscribed before any chunk gets the pod's first one."""
    await agent_up(server.url, start_agent)
    body = {"pod": {"services": [{"name": "driver", "command": ["sh", "-c", ECHO]}]}}
    async with server.client() as client:
        created = await create(client, body)
        base = f"/v1/jobs/{created['job_id']}/streams"
        listed = (await client.get(base)).json()
        assert [(s["name"], s["kind"], s["count"], s["subscribable"]) for s in listed] == [
            ("control", "data", 0, True)
        ]
        early = await client.post(f"{base}/control/subscribe", json={})
        assert early.status_code == 200, early.text
        assert (await client.post(f"{base}/nothing/subscribe", json={})).status_code == 404
        await phase(client, created["id"], "ready")
        assert [s["count"] for s in (await client.get(base)).json()] == [0]  # no chunk yet
        ticket = (await client.post(f"{base}/control/subscribe", json={})).json()["ticket"]
        got: list[Any] = []
        follow = f"{base}/control/data?ticket={ticket}"
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_events, client, follow, 1, None, got)
            sent = await client.post(
                f"{base}/control/teleop?ticket={ticket}", json={"throttle": 0.25}
            )
            assert sent.status_code == 202, sent.text
            assert sent.json() == {"delivered": True, "stream": "control", "seq": 1}
        [(event, chunk, _)] = got
        assert event == "stream" and chunk["stream"] == "control" and chunk["seq"] == 1
        assert json.loads(chunk["data"])["frame"] == {"throttle": 0.25}

        async def counted() -> bool:  # the store has the chunk a moment after its ring
            return [s["count"] for s in (await client.get(base)).json()] == [1]

        await wait_for(counted, 30, "the chunk counted in the stream's view")
        await client.delete(f"/v1/sessions/{created['id']}")


async def test_a_server_restart_keeps_the_session_and_its_deadline(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    settings = e2e_settings(tmp_path / "server")
    first = await start_server(nursery, settings, heartbeat_sec=0.5)
    await agent_up(first.url, start_agent)
    marker = f"{840 + random.random():.6f}"
    async with first.client() as client:
        created = await create(client, pod(marker, ttl=6))
        ready = await phase(client, created["id"], "ready")
    first.stop.set()
    await first.done.wait()
    port = int(first.url.rsplit(":", 1)[1])
    again = await start_server(nursery, settings, port=port, heartbeat_sec=0.5)
    async with again.client() as client:
        view = (await client.get(f"/v1/sessions/{created['id']}")).json()
        assert (
            view["phase"] in ("ready", "idle") and view["last_keepalive"] == ready["last_keepalive"]
        )
        reaped = await phase(client, created["id"], "stopped", within=60)
        assert reaped["error"].startswith("reaped: no keepalive for 6 s")
    again.stop.set()
    await again.done.wait()
