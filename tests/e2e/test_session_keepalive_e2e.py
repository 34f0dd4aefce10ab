"""Cheap keepalives over a real server (docs/sessions.md "Keepalives"): the batch route's
answer and its not_found / not_live split (another org's session is not_found, like an
unknown id), the keepalives a killed server had acknowledged more than one flush period
before are in the rows a restarted server reads, and an open driving stream connection
keeps a session alive past its TTL with no request, reaped once it closes.

No agent: the sessions stay ``launching``, which is live."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from runplane.actors.keepalives import KEEPALIVE_FLUSH_SEC, FlushKeepalives
from runplane.services.sessions import KEEPALIVES, KEEPALIVES_ID
from runplane.sessions import repo
from tests.conftest import DURABLE_BACKENDS

from .conftest import ADMIN, LiveServer, e2e_settings, start_server, wait_for
from .test_cli_e2e import cli
from .test_fair_share_e2e import member_of
from .test_pipelines_e2e import ServeProcess, _free_port
from .test_sessions_e2e import phase

POD = {"pod": {"services": [{"name": "svc", "command": ["sleep", "600"]}]}}


def parse_iso_ms(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


async def created(client: httpx.AsyncClient, headers: dict[str, str], **extra: Any) -> str:
    response = await client.post("/v1/sessions", json={**POD, **extra}, headers=headers)
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


async def test_batch_keepalive_splits_kept_not_found_and_not_live(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_server(nursery, e2e_settings(tmp_path / "server", auth="required"))
    async with server.client() as client:
        org_a = await member_of(client, "org_ka_a")
        org_b = await member_of(client, "org_ka_b")
        live_1, live_2 = await created(client, org_a), await created(client, org_a)
        ended = await created(client, org_a)
        assert (await client.delete(f"/v1/sessions/{ended}", headers=org_a)).status_code == 200
        foreign = await created(client, org_b)
        unknown = "ses_01jd8x3k2m7f4q9w5e6r8t0yzb"
        before = (await client.get(f"/v1/sessions/{live_2}", headers=org_a)).json()
        ids = [live_2, foreign, ended, unknown, live_1, live_2]
        answer = await client.post("/v1/sessions/keepalive", json={"ids": ids}, headers=org_a)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert [(s["id"], s["phase"]) for s in body["sessions"]] == [
            (live_2, "launching"),
            (live_1, "launching"),
        ]
        assert body["not_found"] == [foreign, unknown] and body["not_live"] == [ended]
        kept = parse_iso_ms(body["sessions"][0]["last_keepalive"])
        assert kept >= parse_iso_ms(before["last_keepalive"])
        # the views show the keepalive at once (before the log has written it)
        view = (await client.get(f"/v1/sessions/{live_2}", headers=org_a)).json()
        assert view["last_keepalive"] == body["sessions"][0]["last_keepalive"]
        # org B's caller is told nothing about org A's sessions
        theirs = (
            await client.post("/v1/sessions/keepalive", json={"ids": ids}, headers=org_b)
        ).json()
        assert [s["id"] for s in theirs["sessions"]] == [foreign]
        assert theirs["not_found"] == [live_2, ended, unknown, live_1]
        assert theirs["not_live"] == []
        bad = await client.post(
            "/v1/sessions/keepalive", json={"ids": [live_1, "job_x"]}, headers=org_a
        )
        assert bad.status_code == 422 and bad.json()["errors"][0]["key"] == "ids[1]"
        many = await client.post(
            "/v1/sessions/keepalive", json={"ids": [live_1] * 1001}, headers=org_a
        )
        assert many.status_code == 422 and many.json()["errors"][0]["key"] == "ids"
        typo = await client.post("/v1/sessions/keepalive", json={"id": [live_1]}, headers=org_a)
        assert typo.status_code == 400
    server.stop.set()
    await server.done.wait()


async def test_a_killed_server_keeps_the_keepalives_older_than_one_period(
    tmp_path: Path,
) -> None:
    port, data = _free_port(), tmp_path / "server"
    first = ServeProcess(data, port, tmp_path / "serve.log")
    try:
        await first.ready()
        async with httpx.AsyncClient(base_url=first.url, timeout=30) as client:
            session = await created(client, {})
            answered: list[tuple[float, int]] = []  # (when the answer came, its keepalive)
            end = time.monotonic() + 2.5 * KEEPALIVE_FLUSH_SEC
            while time.monotonic() < end:
                response = await client.post(f"/v1/sessions/{session}/keepalive")
                assert response.status_code == 200, response.text
                kept = parse_iso_ms(response.json()["last_keepalive"])
                answered.append((time.monotonic(), kept))
                await trio.sleep(0.25)
        first.kill()  # SIGKILL: nothing flushed on the way out
        killed_at = time.monotonic()
    finally:
        first.kill()
    again = ServeProcess(data, port, tmp_path / "serve.log")
    try:
        await again.ready()
        async with httpx.AsyncClient(base_url=again.url, timeout=30) as client:
            view = (await client.get(f"/v1/sessions/{session}")).json()
        stored = parse_iso_ms(view["last_keepalive"])
        # every keepalive answered more than a period (and a margin for the flush's own
        # time) before the kill was written; nothing newer than the last one answered
        older = [k for at, k in answered if at < killed_at - KEEPALIVE_FLUSH_SEC - 0.5]
        assert older and stored >= max(older)
        assert stored <= answered[-1][1]
        assert view["phase"] == "launching"
    finally:
        again.kill()


async def follow(server: LiveServer, url: str, opened: trio.Event, close: trio.Event) -> None:
    async with server.client() as client, client.stream("GET", url) as response:
        assert response.status_code == 200
        opened.set()
        await close.wait()


async def test_an_open_stream_connection_keeps_its_session_alive(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_server(nursery, e2e_settings(tmp_path / "server"))
    ttl = 3
    async with server.client() as client:
        made = await client.post("/v1/sessions", json={**POD, "idle_ttl_sec": ttl})
        session, job = made.json()["id"], made.json()["job_id"]
        ticket = (await client.post(f"/v1/jobs/{job}/streams/control/subscribe", json={})).json()
        assert ticket["teleop"] is True  # an open deploy's caller may drive
        opened, close = trio.Event(), trio.Event()
        nursery.start_soon(follow, server, ticket["url"], opened, close)
        await opened.wait()
        await trio.sleep(3 * ttl)  # three TTLs with no request but the open connection
        view = (await client.get(f"/v1/sessions/{session}")).json()
        assert view["phase"] == "launching", view
        assert server.root.sessions.drivers.count(session) == 1
        close.set()

        async def closed() -> bool:
            return bool(server.root.sessions.drivers.count(session) == 0)

        await wait_for(closed, 10, "the close noticed")
        closed_at = time.time()
        reaped = await phase(client, session, "stopped", within=30)
        assert reaped["error"].startswith(f"reaped: no keepalive for {ttl} s")
        # the TTL ran from the close, not from the last request
        assert parse_iso_ms(reaped["last_keepalive"]) >= int((closed_at - 1) * 1000)
    server.stop.set()
    await server.done.wait()


async def test_the_cli_keeps_several_sessions_alive_in_one_request(server: LiveServer) -> None:
    async with server.client() as client:
        live_1, live_2 = await created(client, {}), await created(client, {})
        ended = await created(client, {})
        await client.delete(f"/v1/sessions/{ended}")
    unknown = "ses_01jd8x3k2m7f4q9w5e6r8t0yzb"
    done = await cli(server.url, "session", "keepalive", live_1, live_2)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.decode().splitlines()
    assert lines[0].split() == ["SESSION", "PHASE", "KEEPALIVE"]
    assert [line.split()[:2] for line in lines[1:]] == [
        [live_1, "launching"],
        [live_2, "launching"],
    ]
    partly = await cli(server.url, "session", "keepalive", live_1, ended, unknown)
    assert partly.returncode == 3
    assert partly.stderr.decode().splitlines() == [f"not found: {unknown}", f"not live: {ended}"]
    one = await cli(server.url, "session", "keepalive", live_2)
    assert one.returncode == 0 and one.stdout.decode().startswith(f"{live_2} launching")


@pytest.mark.parametrize("backend", DURABLE_BACKENDS)
async def test_the_keepalive_log_writes_one_batch_on_each_store(
    nursery: trio.Nursery, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    env = {"database_url": request.getfixturevalue("pg_database")} if backend == "postgres" else {}
    server = await start_server(nursery, e2e_settings(tmp_path / "server", **env))
    root = server.root
    async with server.client() as client:
        ids = [await created(client, {}, idle_ttl_sec=300) for _ in range(3)]
        answer = await client.post("/v1/sessions/keepalive", json={"ids": ids})
        assert answer.status_code == 200, answer.text
        kept = {s["id"]: parse_iso_ms(s["last_keepalive"]) for s in answer.json()["sessions"]}
        written = await root.registry.ask(KEEPALIVES, KEEPALIVES_ID, FlushKeepalives())
        assert written == 3
        for session_id in ids:
            row = await repo.get(root.store, session_id, None)
            assert row is not None and row.state.last_keepalive == kept[session_id]
    server.stop.set()
    await server.done.wait()


async def test_a_watch_only_follower_does_not_keep_a_session_alive(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    server = await start_server(nursery, e2e_settings(tmp_path / "server", auth="required"))
    async with server.client() as client:
        member = await member_of(client, "org_ka_w")
        minted = await client.post(
            "/v1/auth/tokens",
            json={"subject": "watcher", "org_id": "org_ka_w", "role": "viewer"},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        viewer = {"Authorization": f"Bearer {minted.json()['token']}"}
        session = await created(client, member, idle_ttl_sec=2)
        job = (await client.get(f"/v1/sessions/{session}", headers=member)).json()["job_id"]
        ticket = (
            await client.post(f"/v1/jobs/{job}/streams/control/subscribe", json={}, headers=viewer)
        ).json()
        assert ticket["teleop"] is False
        opened, close = trio.Event(), trio.Event()
        nursery.start_soon(follow, server, ticket["url"], opened, close)
        await opened.wait()
        reaped = await phase_of(client, session, member)
        assert reaped["error"].startswith("reaped: no keepalive for 2 s")
        close.set()
    server.stop.set()
    await server.done.wait()


async def phase_of(
    client: httpx.AsyncClient, session: str, headers: dict[str, str]
) -> dict[str, Any]:
    async def stopped() -> dict[str, Any] | None:
        view = (await client.get(f"/v1/sessions/{session}", headers=headers)).json()
        return dict(view) if view["phase"] == "stopped" else None

    return dict(await wait_for(stopped, 30, "the session reaped"))
