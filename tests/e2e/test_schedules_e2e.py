"""A schedule on a real server with a real agent, in real time: ``every: 2s`` fires three
jobs in about six seconds, which run to ``succeeded`` on the agent; suspended, it fires no
more (docs/schedules.md). The timing under trio's clock: tests/actors/test_scheduler.py."""

from __future__ import annotations

import trio

from tests.e2e.conftest import LiveServer, StartAgent, online_nodes, wait_for, wait_phase


async def test_every_2s_fires_jobs_that_run_and_suspend_stops_it(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "schednode")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        made = await client.post(
            "/v1/schedules",
            json={
                "name": "tick",
                "every": "2s",
                "job": {"stack": "shell", "command": ["sh", "-c", "echo tick"]},
            },
        )
        assert made.status_code == 201, made.text
        sid = made.json()["schedule_id"]

        async def three() -> list[str] | None:
            runs = (await client.get(f"/v1/schedules/{sid}")).json()["runs"]
            jobs = [r["job_id"] for r in runs if r["outcome"] == "created"]
            return jobs if len(jobs) >= 3 else None

        jobs = await wait_for(three, 20, "three occurrences")
        for job_id in jobs:
            done = await wait_phase(client, job_id, "succeeded", "failed")
            assert done["phase"] == "succeeded", done
        paused = await client.patch(f"/v1/schedules/{sid}", json={"suspend": True})
        assert paused.status_code == 200 and paused.json()["next_run_at"] is None
        before = len(paused.json()["runs"])
        await trio.sleep(4.5)  # two periods: nothing more may fire
        after = (await client.get(f"/v1/schedules/{sid}")).json()
        assert len(after["runs"]) == before
        listed = (await client.get("/v1/jobs?stack=shell&limit=100")).json()
        items = listed["items"] if isinstance(listed, dict) else listed
        assert {j["job_id"] for j in items} >= set(jobs)
