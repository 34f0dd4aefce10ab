"""Replicas outlive the store's restarts (issue 41 item 7; docs/operations.md "High
availability"): a replica that loses its lease steps down inside its process and
campaigns again.

* Two ``runplane serve`` replicas under ``RUNPLANE_HA=1`` and a real agent, on a private
  PostgreSQL cluster (scripts/pgtest) that is restarted twice in a row (``pg_ctl stop -m
  fast``, then ``-m immediate``: a crash; each then started again): both replica
  processes stay up the whole time (same pids), a leader is
  elected again after each restart, under a newer epoch, and ``/v1/ha`` on both names one
  leader and one follower; every job acknowledged before, during and after each restart
  (submits all along, retried as a client must) succeeds, and runs exactly once (each
  appends its id to a file outside its workdir); an SSE follower of a job running across
  both restarts sees every log line once, in order (reconnecting with Last-Event-ID).
* A leader paused (SIGSTOP) past its lease: the other replica takes over; resumed, the old
  leader steps down in its process (same pid, ``role`` follower, a ``stepped down`` log
  line naming its lost epoch), a submit it read after the pause is never acknowledged nor
  stored, and it relays to the new leader afterwards.
* In one process: a replica whose lease is taken from it again and again steps down and
  leads again each time; the old terms' apps are released and its threads do not pile up.
  A revoked fence (a lost term's) lets no commit through again, whatever its epoch.

No timing is asserted (the machines are noisy).
"""

from __future__ import annotations

import gc
import glob
import os
import shutil
import signal
import subprocess
import threading
import uuid
import weakref
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio

from bench.ha_cluster import Cluster, Replica
from runplane.http.replica import Replica as LiveReplica
from runplane.persistence.errors import FencedError, WriteBatchError
from runplane.persistence.postgres import Fence, PostgresStore
from runplane.settings import load_settings
from tests.e2e.conftest import ADMIN, StartAgent, wait_for
from tests.e2e.test_ha_e2e import TERMINAL, Failover, follow
from tests.test_scripts import needs_postgres_binaries, pg_dir, pgtest  # noqa: F401 (fixture)

ENV = {"RUNPLANE_ADMIN_TOKEN": ADMIN, "RUNPLANE_EGRESS_ALLOW": "127.0.0.1"}


async def _pg(*args: str | Path) -> str:
    done = await trio.to_thread.run_sync(lambda: pgtest(*args))
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


def _stop_postgres(pg: Path, mode: str) -> None:
    """``pg_ctl stop -m MODE`` on the private cluster of scripts/pgtest (as its owner, the
    postgres OS user, when we are root, as scripts/pgtest does)."""
    if mode == "fast":
        done = pgtest("stop", pg)  # pg_ctl -m fast
        assert done.returncode == 0, done.stderr
        return
    found = shutil.which("pg_ctl") or max(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    command = [found, "-D", str(pg / "data"), "-m", mode, "-w", "stop"]
    if os.geteuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


def _statuses(cluster: Cluster) -> list[dict[str, Any] | None]:
    return [replica.status() for replica in cluster.replicas]


async def wait_new_leader(cluster: Cluster, above: int) -> tuple[Replica, int]:
    """Wait until one replica leads under an epoch above ``above`` and every replica says
    so (the other one a follower); (the leader, its epoch)."""

    def settled() -> tuple[Replica, int] | None:
        statuses = _statuses(cluster)
        if any(s is None or s["leader"] is None for s in statuses):
            return None
        epochs = {s["leader"]["epoch"] for s in statuses if s}
        roles = sorted(s["role"] for s in statuses if s)
        if len(epochs) != 1 or roles != ["follower", "leader"] or epochs.pop() <= above:
            return None
        index = next(i for i, s in enumerate(statuses) if s and s["role"] == "leader")
        return cluster.replicas[index], int(statuses[index]["leader"]["epoch"])  # type: ignore[index]

    async def poll() -> tuple[Replica, int] | None:
        return await trio.to_thread.run_sync(settled)

    found: tuple[Replica, int] = await wait_for(poll, 60, f"a leader above epoch {above}")
    return found


def _pids(cluster: Cluster) -> list[int]:
    return [replica.proc.pid for replica in cluster.replicas if replica.proc is not None]


def _stepped_down(cluster: Cluster, replica: Replica) -> list[dict[str, Any]]:
    return [r for r in cluster.log_records(replica) if r.get("msg") == "stepped down"]


@needs_postgres_binaries
async def test_replicas_outlive_two_postgres_restarts(
    pg_dir: Path,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    start_agent: StartAgent,
    shared: Path,
) -> None:
    url = await _pg("start", pg_dir)
    cluster = Cluster(url, tmp_path, replicas=2, env=ENV)
    failover = Failover(cluster.urls)
    try:
        await trio.to_thread.run_sync(cluster.start_all)
        _, epoch = await wait_new_leader(cluster, 0)
        pids = _pids(cluster)
        start_agent(",".join(cluster.urls), "sd-a", "--max-concurrency", "4")

        async def online() -> bool:
            nodes = (await failover.request("GET", "/v1/nodes")).json()
            return any(n["status"] == "online" for n in nodes)

        await wait_for(online, 60, "the agent online")
        runs = shared / "runs.log"
        runs.touch()
        runs.chmod(0o666)  # jobs append to it, each under a uid of its own
        body = {
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
        acknowledged = [long_id] + [await failover.submit(body) for _ in range(3)]
        seen: list[tuple[int, str]] = []
        epochs = [epoch]
        stop_load = trio.Event()

        async def load() -> None:
            # submits all along, through either replica, retried (same Idempotency-Key)
            # on a refusal or a cut connection: those acknowledged must all run, once
            while not stop_load.is_set():
                acknowledged.append(await failover.submit(body))
                await trio.sleep(0.2)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(load)
            nursery.start_soon(follow, cluster.urls, long_id, seen)
            for mode in ("fast", "immediate"):  # a clean stop, then a crash
                await trio.sleep(1)
                await trio.to_thread.run_sync(_stop_postgres, pg_dir, mode)
                await trio.sleep(1)
                await _pg("start", pg_dir)
                _, epoch = await wait_new_leader(cluster, epoch)
                epochs.append(epoch)
                assert all(r.alive for r in cluster.replicas), cluster.tails()
                assert _pids(cluster) == pids, cluster.tails()
            await trio.sleep(1)
            stop_load.set()

        async def all_ended() -> bool:
            for job_id in acknowledged:
                if (await failover.job(job_id))["phase"] not in TERMINAL:
                    return False
            return True

        await wait_for(all_ended, 120, "every acknowledged job to end")
        views = [await failover.job(job_id) for job_id in acknowledged]
        failed = [(v["job_id"], v["phase"], v["error"]) for v in views if v["phase"] != "succeeded"]
        assert failed == [], (failed, cluster.tails())
        started = runs.read_text().split()
        assert {j: started.count(j) for j in acknowledged} == dict.fromkeys(acknowledged, 1)
        # every line of the job running across both restarts stored once, and its SSE
        # follower (cut at each step-down, back with Last-Event-ID) saw each once, in order
        expected = [f"line {i}" for i in range(1, lines + 1)]
        logs = await failover.request("GET", f"/v1/jobs/{long_id}/logs?stream=stdout")
        assert [e["line"] for e in logs.json()["logs"]] == expected
        assert [line for _, line in seen] == expected, seen
        # the same two processes all along, one leader and one follower
        assert all(r.alive for r in cluster.replicas) and _pids(cluster) == pids
        assert sorted(s["role"] for s in _statuses(cluster) if s) == ["follower", "leader"]
        # each restart ended a term in process: the lost epochs are logged
        lost = [r["epoch"] for rep in cluster.replicas for r in _stepped_down(cluster, rep)]
        assert set(epochs[:-1]) <= set(lost), (epochs, lost, cluster.tails())
        assert all(r.exits == [] for r in cluster.replicas)
    finally:
        await failover.client.aclose()
        await trio.to_thread.run_sync(cluster.stop_all)


async def test_a_paused_leader_steps_down_in_process_and_writes_nothing(
    pg_database: str, tmp_path: Path
) -> None:
    cluster = Cluster(pg_database, tmp_path, replicas=2, env=ENV)
    failover = Failover(cluster.urls)
    try:
        await trio.to_thread.run_sync(cluster.start_all)
        leader, epoch = await wait_new_leader(cluster, 0)
        assert leader.proc is not None
        pid = leader.proc.pid
        before = await failover.submit({"stack": "shell", "command": ["true"]})
        cluster.kill(leader, signal.SIGSTOP)
        marker = f"paused-{uuid.uuid4().hex}"
        answers: list[int | str] = []

        async def submit_to_the_paused_one() -> None:
            # sent while it is paused: it reads the request only once resumed
            async with httpx.AsyncClient(timeout=30.0) as client:
                try:
                    response = await client.post(
                        f"{leader.url}/v1/jobs",
                        json={"stack": "shell", "command": ["echo", marker]},
                    )
                    answers.append(response.status_code)
                except httpx.TransportError as exc:
                    answers.append(type(exc).__name__)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(submit_to_the_paused_one)
            await trio.to_thread.run_sync(lambda: cluster.wait_leader(other_than=leader))
            cluster.kill(leader, signal.SIGCONT)
        new, new_epoch = await wait_new_leader(cluster, epoch)
        assert new is not leader and new_epoch > epoch
        # the same process, a follower again, that says why
        assert leader.alive and leader.proc.pid == pid, cluster.tails()
        status = leader.status()
        assert status is not None and status["role"] == "follower", status
        assert status["leader"]["epoch"] == new_epoch, status
        records = _stepped_down(cluster, leader)
        assert [r["epoch"] for r in records] == [epoch], cluster.tails()
        assert records[0]["reason"], records
        assert answers and answers[0] not in (200, 201, 202), answers
        # nothing of the paused leader's submit reached the store; it relays to the new
        # leader, which has what the old one acknowledged
        async with httpx.AsyncClient(base_url=leader.url, timeout=10.0) as client:
            items = (await client.get("/v1/jobs", params={"limit": 100})).json()
            assert all(marker not in str(job["spec"]) for job in items)
            assert any(job["job_id"] == before for job in items)
            after = await client.post("/v1/jobs", json={"stack": "shell", "command": ["true"]})
            assert after.status_code == 202, after.text
        assert leader.exits == [] and leader.alive
    finally:
        await failover.client.aclose()
        await trio.to_thread.run_sync(cluster.stop_all)


def _take_lease(url: str) -> int:
    """Move the lease to a made-up holder under the next epoch, as a takeover by another
    replica would (nobody holds that epoch's advisory lock: the replica may take it
    back at once); the epoch taken from."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "UPDATE ha_lease SET epoch = epoch + 1, holder = 'someone-else' "
            "WHERE name = 'leader' RETURNING epoch"
        ).fetchone()
    assert row is not None
    return int(row[0]) - 1


async def test_stepping_down_again_and_again_releases_the_old_terms(
    pg_database: str, tmp_path: Path, nursery: trio.Nursery
) -> None:
    settings = load_settings(
        {
            "RUNPLANE_HA": "1",
            "RUNPLANE_LOCAL_AGENT": "0",
            "RUNPLANE_DATABASE_URL": pg_database,
            "RUNPLANE_DATA_DIR": str(tmp_path / "data"),
            "RUNPLANE_SECRET_KEY": "ab" * 32,
            "RUNPLANE_HA_LEASE_SEC": "1.5",
        }
    )
    replica = LiveReplica(settings)
    await replica.open()
    await nursery.start(replica.run, "http://127.0.0.1:9")

    async def leading(above: int) -> int:
        async def poll() -> int | None:
            status = replica.status()
            epoch = status["epoch"] if status["role"] == "leader" else None
            return epoch if replica.gate.leading and epoch and epoch > above else None

        found: int = await wait_for(poll, 30, f"the replica to lead above epoch {above}")
        return found

    old_apps: list[weakref.ref[Any]] = []
    threads: list[int] = []
    epoch = await leading(0)
    for _ in range(5):
        old_apps.append(weakref.ref(replica.term.app))
        assert await trio.to_thread.run_sync(_take_lease, pg_database) == epoch
        epoch = await leading(epoch + 1)  # the epoch taken away is not its own
        threads.append(threading.active_count())
    assert replica.step_downs == 5 and not replica.failed.is_set()
    gc.collect()
    assert [ref() for ref in old_apps] == [None] * 5
    # the old terms' writer threads and pools are gone: no thread per step-down
    assert threads[-1] <= threads[0] + 2, threads
    await replica.stop()


async def test_a_revoked_fence_lets_no_commit_through_again(pg_database: str) -> None:
    """The store of a lost term never commits again, even if its fence were given the
    lease's current epoch (a later term of the same replica): its writes fail at once."""
    fence = Fence(idle_timeout_ms=3000)
    fence.epoch = 1  # no lease row yet: nothing contradicts it
    async with PostgresStore(pg_database, fence=fence) as store:
        await store.execute(
            "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, 0)", ("before", "1")
        )
        fence.revoke()
        fence.epoch = 1  # what a careless later term could do: still refused
        with pytest.raises(WriteBatchError) as refused:
            await store.execute(
                "INSERT INTO meta (key, value, updated_at) VALUES (?, ?, 0)", ("after", "1")
            )
        assert isinstance(refused.value.cause, FencedError), refused.value
        rows = await store.fetchall("SELECT key FROM meta WHERE key IN ('before', 'after')")
    assert [r["key"] for r in rows] == ["before"]
