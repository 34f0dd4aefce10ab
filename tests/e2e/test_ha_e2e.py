"""High availability for real (docs/operations.md "High availability"): three
``runplane serve`` replicas under ``RUNPLANE_HA=1`` on loopback, one PostgreSQL database,
real agents given every replica's URL.

* The leader is SIGKILLed twice under a load of submits (through any replica, each with its
  Idempotency-Key, retried on a refusal or a cut connection as a client must) and running
  jobs: a follower takes over each time; every acknowledged submit is in the
  store and succeeds; no job starts twice (each job appends its id to a shared file), and
  a second attempt is made only for a job whose first never reached its agent; each run's
  end reaches a webhook receiver once, or once more at most; an SSE follower that
  reconnects with Last-Event-ID sees every log line of a job running across both
  takeovers, once, in order.
* A partition: the leader is paused (SIGSTOP) past its lease; a follower takes over; a
  submit sent to the paused one meanwhile is never acknowledged nor stored; resumed, the
  old leader steps down in its process (it lost the lease: no exit) and writes nothing.
* A leader whose database session ends steps down in its process and a follower takes
  over (tests/e2e/test_ha_stepdown_e2e.py: the step-down across PostgreSQL restarts).

No timing is asserted (the machines are noisy): the takeover times are ``bench ha``'s
figures (docs/benchmarks.md "High availability"); a test's failure report names them.
"""

from __future__ import annotations

import json
import signal
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from bench.ha_cluster import Cluster, Replica
from tests.e2e.conftest import ADMIN, StartAgent, wait_for
from tests.webhook_receiver import Receiver

TERMINAL = {"succeeded", "failed", "timeout", "cancelled"}


@pytest.fixture
def cluster(pg_database: str, tmp_path: Path) -> Iterator[Cluster]:
    env = {"RUNPLANE_ADMIN_TOKEN": ADMIN, "RUNPLANE_EGRESS_ALLOW": "127.0.0.1"}
    cluster = Cluster(pg_database, tmp_path, replicas=3, env=env)
    try:
        yield cluster
    finally:
        cluster.stop_all()


class Failover:
    """A client that tries the replicas in turn, as one behind a load balancer would: a
    refusal (502/503) or a cut connection is retried on the next one, a submit with the
    same Idempotency-Key (so a retried submit never makes two jobs)."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.turn = 0
        self.client = httpx.AsyncClient(timeout=10.0)

    async def request(
        self, method: str, path: str, *, within: float = 30.0, **kwargs: Any
    ) -> httpx.Response:
        with trio.move_on_after(within):
            while True:
                url = self.urls[self.turn % len(self.urls)]
                self.turn += 1
                try:
                    response = await self.client.request(method, url + path, **kwargs)
                except httpx.TransportError:
                    await trio.sleep(0.05)
                    continue
                if response.status_code not in (502, 503):
                    return response
                await trio.sleep(0.05)
        raise AssertionError(f"{method} {path}: no replica answered in {within} s")

    async def submit(self, body: dict[str, Any]) -> str:
        key = uuid.uuid4().hex
        response = await self.request(
            "POST", "/v1/jobs", json=body, headers={"Idempotency-Key": key}
        )
        assert response.status_code == 202, response.text
        return str(response.json()["job_id"])

    async def job(self, job_id: str) -> dict[str, Any]:
        response = await self.request("GET", f"/v1/jobs/{job_id}")
        assert response.status_code == 200, (job_id, response.text)
        return dict(response.json())


@pytest.fixture
async def failover(cluster: Cluster) -> AsyncIterator[Failover]:
    client = Failover(cluster.urls)
    yield client
    await client.client.aclose()


async def follow(urls: list[str], job_id: str, seen: list[tuple[int, str]]) -> int:
    """Follow a job's events, reconnecting to the next replica with Last-Event-ID after a
    cut; its log lines go to ``seen`` as (event id, line). Returns the reconnects made."""
    last: str | None = None
    reconnects = -1
    turn = 0
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0, read=30.0)) as client:
        while True:
            reconnects += 1
            url = urls[turn % len(urls)]
            turn += 1
            headers = {"Last-Event-ID": last} if last is not None else {}
            try:
                async with client.stream(
                    "GET", f"{url}/v1/jobs/{job_id}/events", headers=headers
                ) as response:
                    if response.status_code != 200:
                        await trio.sleep(0.1)
                        continue
                    event_id, kind, ended = None, None, False
                    async for line in response.aiter_lines():
                        if line.startswith("id: "):
                            event_id = line[4:]
                        elif line.startswith("event: "):
                            kind = line[7:]
                        elif line.startswith("data: ") and event_id is not None:
                            data = json.loads(line[6:])
                            if kind == "log" and data.get("stream") == "stdout":
                                seen.append((int(event_id), data["line"]))
                            if kind == "phase" and data.get("phase") in TERMINAL:
                                ended = True
                            last = event_id
                    if ended:
                        return reconnects
            except (httpx.TransportError, httpx.RemoteProtocolError):
                await trio.sleep(0.1)


async def wait_leader(cluster: Cluster, other_than: Replica | None = None) -> Replica:
    return await trio.to_thread.run_sync(
        lambda: cluster.wait_leader(other_than=other_than, timeout=30.0)
    )


async def test_killing_the_leader_under_load_loses_and_doubles_nothing(
    cluster: Cluster,
    failover: Failover,
    start_agent: StartAgent,
    shared: Path,
    nursery: trio.Nursery,
) -> None:
    leader = await trio.to_thread.run_sync(cluster.start_all)
    receiver = await Receiver.start(nursery)
    hook = await failover.request(
        "POST",
        "/v1/webhooks",
        json={"url": receiver.url(), "org_id": "org_default"},
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert hook.status_code == 201, hook.text
    servers = ",".join(cluster.urls)
    for name in ("ha-a", "ha-b"):
        start_agent(servers, name, "--max-concurrency", "4")

    async def two_online() -> bool:
        nodes = (await failover.request("GET", "/v1/nodes")).json()
        return sum(1 for n in nodes if n["status"] == "online") == 2

    await wait_for(two_online, 60, "two agents online")
    runs = shared / "runs.log"
    runs.touch()
    runs.chmod(0o666)  # every job appends to it, each under a uid of its own
    job_body = {
        "stack": "shell",
        "command": ["sh", "-c", f'echo "$RUNPLANE_JOB_ID" >> {runs}; sleep 1; echo done'],
    }
    lines = 40
    long_id = await failover.submit(
        {
            "stack": "shell",
            "command": [
                "sh",
                "-c",
                f'echo "$RUNPLANE_JOB_ID" >> {runs}; '
                f"for i in $(seq 1 {lines}); do echo line $i; sleep 0.3; done",
            ],
        }
    )
    acknowledged: list[str] = [long_id]
    seen: list[tuple[int, str]] = []
    takeovers: list[float] = []
    stop_load = trio.Event()

    async def load() -> None:
        while not stop_load.is_set():
            acknowledged.append(await failover.submit(job_body))
            await trio.sleep(0.1)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(load)
        follower_done = trio.Event()

        async def follower() -> None:
            await follow(cluster.urls, long_id, seen)
            follower_done.set()

        nursery.start_soon(follower)
        for _ in range(2):
            await trio.sleep(3)
            killed_at = time.monotonic()
            cluster.kill(leader)
            new = await wait_leader(cluster, other_than=leader)
            takeovers.append(time.monotonic() - killed_at)
            cluster.start(leader)  # its supervisor starts it again: a follower now
            leader = new
        await trio.sleep(2)
        stop_load.set()
        with trio.move_on_after(120):
            await follower_done.wait()
        if not follower_done.is_set():
            view = await failover.job(long_id)
            nursery.cancel_scope.cancel()
            raise AssertionError(
                f"the follower did not see {long_id} end: {view['phase']}, "
                f"{len(seen)} lines seen\n{cluster.tails()}"
            )

    async def all_ended() -> bool:
        for job_id in acknowledged:
            if (await failover.job(job_id))["phase"] not in TERMINAL:
                return False
        return True

    await wait_for(all_ended, 120, "every acknowledged job to end")
    views = [await failover.job(job_id) for job_id in acknowledged]
    started = runs.read_text().split()
    doubled = {j: started.count(j) for j in acknowledged if started.count(j) != 1}
    report = {"takeovers_s": takeovers, "jobs": len(acknowledged), "doubled": doubled}
    assert len(acknowledged) > 20, (report, cluster.tails())
    failed = [(v["job_id"], v["phase"], v["error"]) for v in views if v["phase"] != "succeeded"]
    assert failed == [], (report, failed, cluster.tails())
    # a second attempt only for a job whose first never reached its agent: the old leader
    # stored the assignment and died before the run order left (it ran once, above)
    for v in views:
        if v["attempts"]:
            logs = await failover.request("GET", f"/v1/jobs/{v['job_id']}/logs?stream=system")
            system = [e["line"] for e in logs.json()["logs"]]
            assert v["attempts"] == 1, (v["job_id"], system)
            assert any("reconnected without the job" in line for line in system), system
    assert doubled == {}, (report, cluster.tails())
    # every line stored once (one in flight at a kill is resent by the agent), and the
    # follower saw each once, in order, across two takeovers
    expected = [f"line {i}" for i in range(1, lines + 1)]
    logs = await failover.request("GET", f"/v1/jobs/{long_id}/logs?stream=stdout")
    assert [e["line"] for e in logs.json()["logs"]] == expected
    assert [line for _, line in seen] == expected, seen
    ids = [event_id for event_id, _ in seen]
    assert ids == sorted(set(ids))

    # each run's end was delivered once, or once more at most (a takeover between a
    # delivery and its record sends it again)
    async def all_delivered() -> bool:
        ended = {json.loads(r.body)["run"]["id"] for r in receiver.received}
        return ended >= set(acknowledged)

    await wait_for(all_delivered, 60, "a webhook delivery for every run's end")
    deliveries = [json.loads(r.body)["run"]["id"] for r in receiver.received]
    sent = {j: deliveries.count(j) for j in acknowledged}
    assert all(1 <= n <= 2 for n in sent.values()), sent
    # the restarted replicas followed: nobody else claims to lead
    statuses = [r.status() for r in cluster.replicas]
    roles = sorted(s["role"] for s in statuses if s)
    assert roles == ["follower", "follower", "leader"], (roles, cluster.tails())


async def stepped_down(cluster: Cluster, replica: Replica) -> dict[str, Any]:
    """Wait until ``replica`` logged its step-down (the lease lost, its process still up:
    docs/operations.md "High availability"); that record."""

    async def logged() -> dict[str, Any] | None:
        records = cluster.log_records(replica)
        return next((r for r in records if r.get("msg") == "stepped down"), None)

    record: dict[str, Any] = await wait_for(logged, 30, "the old leader to step down")
    assert replica.alive, cluster.tails()
    return record


async def test_a_paused_leader_past_its_lease_writes_nothing_and_steps_down(
    cluster: Cluster, failover: Failover
) -> None:
    leader = await trio.to_thread.run_sync(cluster.start_all)
    before = await failover.submit({"stack": "shell", "command": ["true"]})
    cluster.kill(leader, signal.SIGSTOP)
    marker = f"paused-{uuid.uuid4().hex}"
    answers: list[int | str] = []

    async def submit_to_the_paused_one() -> None:
        # sent while it is paused: it reads the request only once resumed
        async with httpx.AsyncClient(timeout=30.0) as client:
            try:
                response = await client.post(
                    f"{leader.url}/v1/jobs", json={"stack": "shell", "command": ["echo", marker]}
                )
                answers.append(response.status_code)
            except httpx.TransportError as exc:
                answers.append(type(exc).__name__)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(submit_to_the_paused_one)
        new = await wait_leader(cluster, other_than=leader)
        await trio.sleep(0.5)
        cluster.kill(leader, signal.SIGCONT)
        await stepped_down(cluster, leader)
    assert answers and answers[0] not in (200, 201, 202), answers
    records = cluster.log_records(leader)
    assert any(r.get("msg") == "lost the lease" for r in records), cluster.tails()
    # nothing of the paused leader's submit reached the store; the new leader serves
    async with httpx.AsyncClient(base_url=new.url, timeout=10.0) as client:
        items = (await client.get("/v1/jobs", params={"limit": 100})).json()
        assert all(marker not in str(job["spec"]) for job in items)
        assert any(job["job_id"] == before for job in items)
        after = await client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})
        assert after.status_code == 202, after.text


async def test_a_leader_cut_from_the_database_steps_down(
    cluster: Cluster, failover: Failover, pg_database: str
) -> None:
    leader = await trio.to_thread.run_sync(cluster.start_all)
    status = leader.status()
    assert status is not None and status["role"] == "leader"
    before = await failover.submit({"stack": "shell", "command": ["true"]})

    def cut() -> int:
        # the database ends the leader's session (a network cut, a DBA's kill): its lease
        # connection, and with it the session's advisory lock
        import psycopg

        with psycopg.connect(pg_database, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (f"runplane-lease {status['replica']}",),
            ).fetchall()
        return len(rows)

    assert await trio.to_thread.run_sync(cut) == 1
    await wait_leader(cluster, other_than=leader)
    record = await stepped_down(cluster, leader)
    assert record["epoch"] == status["epoch"], record
    # the new leader has what the old one acknowledged, and takes writes
    assert (await failover.job(before))["job_id"] == before
    await failover.submit({"stack": "shell", "command": ["true"]})
