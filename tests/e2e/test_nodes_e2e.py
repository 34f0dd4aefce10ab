"""Node heartbeats end to end: a real agent beats every 0.5 s; ``GET /v1/nodes`` shows its
latest beat although the rows are written in batches (every 5 s), and the last beat seen
is still in the row after the server stops in order and starts again."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import trio

from .conftest import StartAgent, e2e_settings, online_nodes, start_server, wait_for


def _ts(view: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(view["last_heartbeat"].replace("Z", "+00:00"))


async def test_node_view_follows_the_beats_and_the_row_keeps_the_last_one(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    settings = e2e_settings(tmp_path / "beats")
    first = await start_server(nursery, settings, heartbeat_sec=0.5)
    port = int(first.url.rsplit(":", 1)[1])
    agent = start_agent(first.url, "beating")
    async with first.client() as client:
        [node] = await wait_for(lambda: online_nodes(client), 30, "the agent")
        hello = _ts(node)

        async def beaten() -> dict[str, Any] | None:
            # several beats later, still inside the heartbeat log's first 5 s interval
            view = (await online_nodes(client) or [None])[0]
            return view if view and (_ts(view) - hello).total_seconds() >= 1.0 else None

        seen = _ts(await wait_for(beaten, 30, "a later heartbeat in the node view"))
    first.stop.set()  # orderly: the session ends, the fleet stops and flushes
    await first.done.wait()
    agent.kill()
    second = await start_server(nursery, settings, port=port, heartbeat_sec=0.5)
    try:
        async with second.client() as client:
            [node] = (await client.get("/v1/nodes")).json()
            assert node["status"] == "offline"  # nobody has said hello to this server
            assert _ts(node) >= seen
    finally:
        second.stop.set()
        await second.done.wait()
