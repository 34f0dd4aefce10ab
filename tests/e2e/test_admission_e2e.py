"""Quotas over real sockets: racing submits against a cap, and a restart that keeps the count.

The server is hypercorn on loopback; 50 clients submit at once. Runs on SQLite and on a
real PostgreSQL (the ``durable_store_url`` fixture).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import trio

from tests.e2e.conftest import ADMIN, e2e_settings, start_server

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
BODY = {"stack": "shell", "command": ["true"]}


async def _race(client: httpx.AsyncClient, n: int) -> tuple[Counter[int], list[str]]:
    statuses: Counter[int] = Counter()
    admitted: list[str] = []

    async def one() -> None:
        response = await client.post("/v1/jobs", json=BODY)
        statuses[response.status_code] += 1
        if response.status_code == 202:
            admitted.append(response.json()["job_id"])
        else:
            problem = response.json()
            assert problem["code"] == "quota_exceeded", problem
            assert "limit is 10" in problem["detail"], problem

    async with trio.open_nursery() as nursery:
        for _ in range(n):
            nursery.start_soon(one)
    return statuses, admitted


async def _live_in_store(server: Any) -> int:
    row = await server.root.store.fetchone(
        "SELECT COUNT(*) AS n FROM jobs WHERE phase IN ('queued','assigned','pulling','running')"
    )
    return int(row["n"])


async def test_concurrent_submits_take_exactly_the_free_slots_and_a_restart_keeps_them(
    nursery: trio.Nursery, data_dir: Path, durable_store_url: str | None
) -> None:
    env = {"database_url": durable_store_url} if durable_store_url else {}
    settings = e2e_settings(data_dir, **env)
    server = await start_server(nursery, settings)
    limits = httpx.Limits(max_connections=50)
    async with httpx.AsyncClient(base_url=server.url, timeout=60, limits=limits) as client:
        put = await client.put(
            "/v1/policy", json={"org": {"max_concurrent_org": 10}}, headers=ADMIN_H
        )
        assert put.status_code == 200, put.text
        statuses, admitted = await _race(client, 50)
        assert statuses == Counter({202: 10, 429: 40})
        assert len(set(admitted)) == 10
        assert await _live_in_store(server) == 10
    server.stop.set()
    await server.done.wait()

    # a new server process state on the same database: the ledger is recounted
    again = await start_server(nursery, settings)
    async with httpx.AsyncClient(base_url=again.url, timeout=60, limits=limits) as client:
        ent = (await client.get("/v1/me/entitlements")).json()
        assert ent["usage"]["queued"] == 10 and ent["remaining"] == {"org_concurrent": 0}
        pre = (await client.get("/v1/policy/preflight?stack=shell")).json()
        assert pre["allowed"] is False and pre["http_status"] == 429
        assert pre["concurrency"]["org_inflight"] == 10
        statuses, _ = await _race(client, 5)
        assert statuses == Counter({429: 5})
        # cancelling two frees exactly two slots, also under a race
        for job_id in admitted[:2]:
            cancelled = await client.post(f"/v1/jobs/{job_id}/cancel")
            assert cancelled.json()["cancelled"] is True
        statuses, _ = await _race(client, 20)
        assert statuses == Counter({202: 2, 429: 18})
        assert await _live_in_store(again) == 10
    again.stop.set()
    await again.done.wait()
