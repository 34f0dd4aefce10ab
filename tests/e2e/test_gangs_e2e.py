"""A gang on two real agents (docs/jobs.md "Multi-node jobs"): both ranks start with their
environment, rank 1 connects over TCP to ``$RUNPLANE_MASTER_ADDR:$RUNPLANE_MASTER_PORT``
where rank 0 listens (a tiny rendezvous), and the gang succeeds; with one node busy the
gang waits holding nothing while a 1-node job runs; killing one rank's agent requeues the
gang whole."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.conftest import (
    AgentProcess,
    LiveServer,
    StartAgent,
    job,
    online_nodes,
    submit,
    wait_for,
    wait_phase,
)

#: rank 0 accepts one connection and prints what it got; rank 1 retries connecting until
#: rank 0 listens, then says hello; each first prints its environment
RENDEZVOUS = """
import os, socket, sys, time
env = {k: os.environ[k] for k in (
    "RUNPLANE_RANK", "RUNPLANE_WORLD_SIZE", "RUNPLANE_MASTER_ADDR", "RUNPLANE_MASTER_PORT")}
print("env", " ".join(f"{k}={v}" for k, v in sorted(env.items())), flush=True)
rank, port = int(env["RUNPLANE_RANK"]), int(env["RUNPLANE_MASTER_PORT"])
if rank == 0:
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("0.0.0.0", port))
    server.listen(1)
    conn, _ = server.accept()
    print("rank 0 got:", conn.recv(100).decode(), flush=True)
else:
    for _ in range(600):
        try:
            conn = socket.create_connection((env["RUNPLANE_MASTER_ADDR"], port), timeout=1)
            break
        except OSError:
            time.sleep(0.1)
    else:
        sys.exit("rank 0 never listened")
    conn.sendall(b"hello from rank 1")
    print("rank 1 connected", flush=True)
"""


def gang(command: list[str], priority: int = 100) -> dict[str, Any]:
    return {"stack": "shell", "command": command, "nodes": 2, "priority": priority}


async def two_nodes(
    server: LiveServer, start_agent: StartAgent, client: httpx.AsyncClient
) -> dict[str, AgentProcess]:
    agents = {n: start_agent(server.url, n, "--max-concurrency", "1") for n in ("ga", "gb")}

    async def both() -> bool:
        return len(await online_nodes(client)) == 2

    await wait_for(both, 30, "two agents")
    return agents


async def logs(client: httpx.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    body = (await client.get(f"/v1/jobs/{job_id}/logs?stream=stdout&limit=1000")).json()
    return list(body["logs"])


async def test_two_ranks_meet_at_the_master_and_the_gang_succeeds(
    server: LiveServer, start_agent: StartAgent
) -> None:
    async with server.client() as client:
        await two_nodes(server, start_agent, client)
        job_id = await submit(client, gang(["python3", "-c", RENDEZVOUS]))
        view = await wait_phase(client, job_id, "succeeded", "failed", within=60)
        lines = await logs(client, job_id)
        assert view["phase"] == "succeeded", (view, lines)
        assert view["nodes"] == 2
        ranks = view["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1]
        assert len({r["node_id"] for r in ranks}) == 2  # distinct nodes
        assert all(r["phase"] == "succeeded" for r in ranks)
        by_rank = {r: [e["line"] for e in lines if e.get("rank") == r] for r in (0, 1)}
        assert "rank 0 got: hello from rank 1" in by_rank[0]
        assert "rank 1 connected" in by_rank[1]
        for rank in (0, 1):
            env = next(line for line in by_rank[rank] if line.startswith("env "))
            assert f"RUNPLANE_RANK={rank}" in env and "RUNPLANE_WORLD_SIZE=2" in env
            assert "RUNPLANE_MASTER_ADDR=127.0.0.1" in env  # where rank 0's agent connects from
            assert f"RUNPLANE_MASTER_PORT={view_port(view, by_rank[0])}" in env


def view_port(view: dict[str, Any], rank0: list[str]) -> str:
    """Rank 0's master port, as its environment says (the same for both ranks)."""
    env = next(line for line in rank0 if line.startswith("env "))
    return env.split("RUNPLANE_MASTER_PORT=")[1].split()[0]


async def test_a_gang_waits_holding_nothing_then_a_lost_rank_requeues_it(
    server: LiveServer, start_agent: StartAgent
) -> None:
    async with server.client() as client:
        agents = await two_nodes(server, start_agent, client)
        busy = await submit(client, {"stack": "shell", "command": ["sleep", "600"]})
        await wait_phase(client, busy, "running")
        # one node free: the gang waits, saying why, and holds nothing
        gang_id = await submit(client, gang(["sleep", "600"], priority=500))

        async def reason() -> str | None:
            found = (await job(client, gang_id)).get("wait_reason") or ""
            return found if found.startswith("gang of 2 ranks: 1 node fits now") else None

        await wait_for(reason, 30, "the gang's wait reason")
        # a 1-node job submitted meanwhile takes the free node
        plain = await submit(client, {"stack": "shell", "command": ["sleep", "600"]})
        await wait_phase(client, plain, "running")
        assert (await job(client, gang_id))["phase"] == "queued"

        # both nodes free up: the gang runs whole
        for job_id in (busy, plain):
            assert (await client.post(f"/v1/jobs/{job_id}/cancel")).json()["cancelled"]
        view = await wait_phase(client, gang_id, "running", within=60)
        assert view["attempt"] == 1 and {r["phase"] for r in view["ranks"]} == {"running"}
        rank1_node = view["ranks"][1]["node_id"]

        # killing rank 1's agent requeues the whole gang (attempts + 1)
        nodes = (await client.get("/v1/nodes")).json()
        agents[next(n["name"] for n in nodes if n["id"] == rank1_node)].kill()

        async def requeued() -> dict[str, Any] | None:
            now = await job(client, gang_id)
            return now if now["attempts"] == 1 else None

        after = await wait_for(requeued, 60, "the gang to be requeued")
        assert after["phase"] == "queued" and after["ranks"] == []
        assert "lost" in after["error"]
        # whole or not at all: one node left, the gang waits and holds nothing there
        await wait_for(reason, 30, "the requeued gang's wait reason")
