"""Node enrollments per address (docs/enrollment.md "Enrollments per address"), with real
agents: past the address's limit an enrollment is closed with 4429, which the agent takes
for a passing condition (it backs off and tries again), not for a refusal (it keeps
running); a node already enrolled is not counted when it connects."""

from __future__ import annotations

from pathlib import Path

import trio

from runplane.http.ratelimit import CLOSE_RATE_LIMITED

from .conftest import ADMIN, StartAgent, e2e_settings, saved_credential, start_server, wait_for

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
LIMITED = "too many node enrollments from this address"


async def test_an_enrollment_over_the_limit_is_retried_not_fatal(
    nursery: trio.Nursery, tmp_path: Path, start_agent: StartAgent
) -> None:
    # one enrollment a minute from an address: the second agent is over it for the test
    settings = e2e_settings(
        tmp_path / "server", auth="required", rate_limit_address="1/min,burst=1"
    )
    server = await start_server(nursery, settings, heartbeat_sec=0.5)
    async with server.client() as client:
        join = await client.post("/v1/nodes/join-tokens", headers=ADMIN_H)
        assert join.status_code == 201, join.text
        token = join.json()["token"]
        first = start_agent(server.url, "first", "--join-token", token)

        async def online() -> list[str]:
            nodes = (await client.get("/v1/nodes", headers=ADMIN_H)).json()
            return [n["name"] for n in nodes if n["status"] == "online"]

        assert await wait_for(online, 30, "the first node") == ["first"]
        await saved_credential(first)
        second = start_agent(server.url, "second", "--join-token", token)

        async def refused_twice() -> bool:
            return second.log.read_text(errors="replace").count(LIMITED) >= 2

        await wait_for(refused_twice, 30, "the second agent to be refused twice and retry")
        assert second.proc.poll() is None, second.log.read_text()  # still trying
        assert f"{CLOSE_RATE_LIMITED}" in second.log.read_text()
        # the first node reconnects with its credential: not counted, so not refused
        first.terminate()
        again = start_agent(server.url, "first")  # the same data dir: its credential

        async def reconnected() -> bool:
            return '"msg":"connected"' in again.log.read_text(errors="replace")

        await wait_for(reconnected, 30, "the first node to connect again")
        assert LIMITED not in again.log.read_text()
