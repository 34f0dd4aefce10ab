"""Pipelines over real sockets with a real agent process running the stages: dependency
order, failure skips, allow_failure, cancel killing the running stage, a quota wait, the
artifact hand-over between stages, and validation that enqueues nothing."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import trio

from .conftest import (
    LiveServer,
    StartAgent,
    e2e_settings,
    job,
    job_logs,
    online_nodes,
    start_server,
    wait_for,
)
from .test_jobs_e2e import _processes_with

ADMIN_H = {"Authorization": "Bearer e2e-admin-token-0123456789"}


def stage(name: str, *needs: str, script: str = "true", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "needs": list(needs),
        "stack": "shell",
        "command": ["sh", "-c", script],
        **extra,
    }


async def create(client: httpx.AsyncClient, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post("/v1/pipelines", json=body)
    assert response.status_code == 202, response.text
    return dict(response.json())


async def finished(client: httpx.AsyncClient, run_id: str, within: float = 90) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        view = (await client.get(f"/v1/pipelines/{run_id}")).json()
        over = view["status"] in ("succeeded", "failed", "cancelled")
        return (
            view
            if over and not any(s["phase"] in ("queued", "running") for s in view["stages"])
            else None
        )

    return dict(await wait_for(check, within, f"pipeline {run_id} to finish"))


async def agent_up(server: LiveServer, start_agent: StartAgent, slots: int = 4) -> None:
    start_agent(server.url, "pl", "--max-concurrency", str(slots))
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")


def phases(view: dict[str, Any]) -> dict[str, str]:
    return {s["name"]: s["phase"] for s in view["stages"]}


async def test_a_diamond_runs_in_dependency_order(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await agent_up(server, start_agent)
    body = {
        "name": "diamond",
        "stages": [
            stage("a", script="sleep 0.3"),
            stage("b", "a", script="sleep 0.3"),
            stage("c", "a", script="sleep 0.5"),
            stage("d", "b", "c"),
        ],
    }
    async with server.client() as client:
        run = await create(client, body)
        view = await finished(client, run["pipeline_run_id"])
        assert view["status"] == "succeeded", view
        assert set(phases(view).values()) == {"succeeded"}
        assert view["progress"]["succeeded"] == 4
        jobs = {s["name"]: await job(client, s["job_id"]) for s in view["stages"]}
        assert jobs["a"]["finished_at"] <= jobs["b"]["started_at"]
        assert jobs["a"]["finished_at"] <= jobs["c"]["started_at"]
        assert max(jobs["b"]["finished_at"], jobs["c"]["finished_at"]) <= jobs["d"]["started_at"]
        listed = (await client.get(f"/v1/jobs?pipeline={run['pipeline_run_id']}")).json()
        assert sorted(j["stage"] for j in listed) == ["a", "b", "c", "d"]
        assert view["created_at"] <= jobs["a"]["created_at"] <= view["started_at"]
        assert view["finished_at"] >= jobs["d"]["finished_at"]


async def test_a_failing_stage_skips_its_dependents_unless_it_may_fail(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await agent_up(server, start_agent)
    async with server.client() as client:
        strict = await create(
            client,
            {
                "stages": [
                    stage("train", script="exit 3"),
                    stage("eval", "train"),
                    stage("report", "eval"),
                    stage("lint"),
                ]
            },
        )
        view = await finished(client, strict["pipeline_run_id"])
        assert view["status"] == "failed"
        assert phases(view) == {
            "train": "failed",
            "eval": "skipped",
            "report": "skipped",
            "lint": "succeeded",
        }
        by_name = {s["name"]: s for s in view["stages"]}
        assert "exit code 3" in by_name["train"]["error"]
        assert by_name["eval"]["job_id"] is None and "'train'" in by_name["eval"]["error"]
        lenient = await create(
            client,
            {
                "stages": [
                    stage("train", script="exit 3", allow_failure=True),
                    stage("eval", "train"),
                    stage("report", "eval"),
                ]
            },
        )
        view = await finished(client, lenient["pipeline_run_id"])
        assert phases(view) == {"train": "failed", "eval": "succeeded", "report": "succeeded"}
        assert view["status"] == "succeeded"


async def test_cancel_mid_run_kills_the_running_stage_and_marks_the_rest(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await agent_up(server, start_agent)
    marker = f"{700 + random.random():.6f}"
    async with server.client() as client:
        run = await create(
            client,
            {
                "stages": [
                    stage("prep"),
                    stage("train", "prep", script=f"sleep {marker}"),
                    stage("eval", "train"),
                ]
            },
        )
        run_id = run["pipeline_run_id"]

        async def training() -> bool:
            view = (await client.get(f"/v1/pipelines/{run_id}")).json()
            return phases(view)["train"] == "running" and bool(_processes_with(marker))

        await wait_for(training, 60, "the train stage's process")
        response = await client.post(f"/v1/pipelines/{run_id}/cancel")
        assert response.status_code == 200, response.text
        view = response.json()
        assert view["status"] == "cancelled"
        assert phases(view) == {"prep": "succeeded", "train": "cancelled", "eval": "cancelled"}

        async def gone() -> bool:
            return not _processes_with(marker)

        await wait_for(gone, 30, "the train stage's process to be killed")
        train = next(s for s in view["stages"] if s["name"] == "train")
        assert (await job(client, train["job_id"]))["phase"] == "cancelled"


async def test_a_stage_waiting_for_quota_starts_when_capacity_frees(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await agent_up(server, start_agent)
    async with server.client() as client:
        put = await client.put(
            "/v1/policy", json={"org": {"max_concurrent_org": 1}}, headers=ADMIN_H
        )
        assert put.status_code == 200, put.text
        run = await create(
            client,
            {"stages": [stage("one", script="sleep 1"), stage("two", script="sleep 0.2")]},
        )
        waiting = [s for s in run["stages"] if s["phase"] == "pending"]
        assert len(waiting) == 1 and "limit is 1" in waiting[0]["wait_reason"], run["stages"]
        view = await finished(client, run["pipeline_run_id"])
        assert view["status"] == "succeeded", view
        first, second = sorted(
            [await job(client, s["job_id"]) for s in view["stages"]],
            key=lambda j: j["created_at"],
        )
        # the waiting stage's job was created only once the other had ended
        assert first["finished_at"] <= second["created_at"]


async def test_a_stage_mounts_the_artifact_of_the_stage_it_needs(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await agent_up(server, start_agent)
    async with server.client() as client:
        run = await create(
            client,
            {
                "name": "handover",
                "stages": [
                    stage(
                        "train",
                        script="echo weights-$RANDOM > model.pt",
                        outputs=[{"artifact": "model", "glob": "model.pt"}],
                    ),
                    stage(
                        "eval",
                        "train",
                        script='cat model.pt; echo "from $TRAIN_JOB"',
                        env={"TRAIN_JOB": "{{stages.train.job_id}}"},
                        inputs=[
                            {
                                "type": "file",
                                "path": "model.pt",
                                "ref": "/v1/artifacts/{{stages.train.job_id}}/model.pt",
                            }
                        ],
                    ),
                ],
            },
        )
        view = await finished(client, run["pipeline_run_id"])
        assert view["status"] == "succeeded", view
        train, evaluate = view["stages"]
        model = await client.get(f"/v1/artifacts/{train['job_id']}/model.pt")
        assert model.status_code == 200 and model.text.startswith("weights-")
        lines = await job_logs(client, evaluate["job_id"], "stdout")
        assert lines == [model.text.strip(), f"from {train['job_id']}"]
        eval_job = await job(client, evaluate["job_id"])
        assert eval_job["spec"]["inputs"][0]["ref"] == (
            f"{server.url}/v1/artifacts/{train['job_id']}/model.pt"
        )


async def test_invalid_pipelines_enqueue_nothing(
    server: LiveServer, start_agent: StartAgent
) -> None:
    await agent_up(server, start_agent)
    async with server.client() as client:
        before = (await client.get("/v1/jobs?paginate=1")).json()["total"]
        for body, status in (
            ({"stages": [stage("a", "b"), stage("b", "a")]}, 400),
            ({"stages": [stage("a", "nope")]}, 400),
            ({"stages": [stage("a"), stage("a")]}, 400),
            (
                {
                    "stages": [
                        stage("a"),
                        {
                            "name": "b",
                            "needs": ["a"],
                            "stack": "sim-cartpole",
                            "config": {"episodes": -1},
                        },
                    ]
                },
                422,
            ),
        ):
            response = await client.post("/v1/pipelines", json=body)
            assert response.status_code == status, response.text
        await trio.sleep(0.3)  # nothing is launched later either
        assert (await client.get("/v1/jobs?paginate=1")).json()["total"] == before
        assert (await client.get("/v1/pipelines")).json() == []


# --- a server killed mid-pipeline ---------------------------------------------------------


class ServeProcess:
    """``runplane serve`` as a real process on a fixed port and data dir."""

    def __init__(self, data_dir: Path, port: int, log: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUNPLANE_")}
        env.update(
            RUNPLANE_DATA_DIR=str(data_dir),
            RUNPLANE_LOCAL_AGENT="0",
            RUNPLANE_ADMIN_TOKEN="e2e-admin-token-0123456789",
        )
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "runplane", "serve", "--port", str(port)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log.open("ab"),
        )

    async def ready(self) -> None:
        async def up() -> bool:
            assert self.proc.poll() is None, "the server exited"
            try:
                async with httpx.AsyncClient(timeout=1) as client:
                    return (await client.get(self.url + "/healthz")).status_code == 200
            except httpx.TransportError:
                return False

        await wait_for(up, 30, "the server to answer /healthz")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # SIGKILL: no shutdown, nothing flushed on the way out
            self.proc.wait()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def test_a_server_killed_mid_pipeline_finishes_it_after_a_restart_running_each_stage_once(
    tmp_path: Path, start_agent: StartAgent
) -> None:
    port, data = _free_port(), tmp_path / "server"
    log = tmp_path / "serve.log"
    server = ServeProcess(data, port, log)
    try:
        await server.ready()
        start_agent(server.url, "survivor", "--max-concurrency", "4")
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            await wait_for(lambda: online_nodes(client), 30, "the agent")
            run = await create(
                client,
                {
                    "stages": [
                        stage("prep", script="sleep 0.2"),
                        stage("train", "prep", script="sleep 3"),
                        stage("eval1", "train"),
                        stage("eval2", "train"),
                        stage("report", "eval1", "eval2"),
                    ]
                },
            )
            run_id = run["pipeline_run_id"]

            async def training() -> bool:
                view = (await client.get(f"/v1/pipelines/{run_id}")).json()
                return phases(view)["train"] == "running"

            await wait_for(training, 60, "the train stage to run")
        server.kill()
        server = ServeProcess(data, port, log)
        await server.ready()
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            view = await finished(client, run_id, within=120)
            assert view["status"] == "succeeded", view
            assert set(phases(view).values()) == {"succeeded"}
            jobs = (await client.get(f"/v1/jobs?pipeline={run_id}")).json()
            assert sorted(j["stage"] for j in jobs) == ["eval1", "eval2", "prep", "report", "train"]
            assert all(j["phase"] == "succeeded" and j["attempts"] == 0 for j in jobs), jobs
            by_stage = {j["stage"]: j["job_id"] for j in jobs}
            assert {s["name"]: s["job_id"] for s in view["stages"]} == by_stage
    finally:
        server.kill()


async def test_a_rebuilt_actor_adopts_a_stage_job_whose_stage_row_was_never_written(
    nursery: trio.Nursery, tmp_path: Path, durable_store_url: str | None
) -> None:
    """The crash window between a stage job's insert and its stage row's update: after a
    restart the run's actor finds the job by its pipeline id and adopts it (one job per
    stage, never two). On SQLite and PostgreSQL."""
    env = {"database_url": durable_store_url} if durable_store_url else {}
    settings = e2e_settings(tmp_path / "server", **env)
    first = await start_server(nursery, settings)
    body = {"stages": [stage("a"), stage("b"), stage("c", "a", "b")]}
    async with first.client() as client:
        run = await create(client, body)
    run_id = run["pipeline_run_id"]
    store = first.root.store
    # as if the server died right after inserting the jobs: the stage rows say pending
    await store.execute(
        "UPDATE pipeline_stages SET phase = 'pending', job_id = NULL WHERE run_id = ?", (run_id,)
    )
    first.stop.set()
    await first.done.wait()

    again = await start_server(nursery, settings)
    async with again.client() as client:
        view = (await client.get(f"/v1/pipelines/{run_id}")).json()
        assert phases(view) == {"a": "queued", "b": "queued", "c": "pending"}
        assert {s["name"]: s["job_id"] for s in view["stages"][:2]} == {
            s["name"]: s["job_id"] for s in run["stages"][:2]
        }
        jobs = (await client.get(f"/v1/jobs?pipeline={run_id}")).json()
        assert sorted(j["stage"] for j in jobs) == ["a", "b"]
        cancelled = (await client.post(f"/v1/pipelines/{run_id}/cancel")).json()
        assert set(phases(cancelled).values()) == {"cancelled"}
    again.stop.set()
    await again.done.wait()
