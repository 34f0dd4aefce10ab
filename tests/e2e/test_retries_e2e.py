"""Retries on a real agent: a job whose first try fails and whose second succeeds (a marker
file in a shared directory tells the tries apart) ends ``succeeded`` with ``retries: 1``
and keeps its id; ``limit: 0`` fails at once; a pipeline retry re-runs only the branch that
failed, keeping the succeeded stages' jobs (docs/jobs.md "Retries", docs/pipelines.md
"Retry")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.e2e.conftest import (
    LiveServer,
    StartAgent,
    job_logs,
    online_nodes,
    submit,
    wait_for,
    wait_phase,
)
from tests.e2e.test_pipelines_e2e import create, finished, phases, stage


def fails_once(marker: Path) -> list[str]:
    """A command that fails (exit 3) unless ``marker`` exists, which it then creates."""
    return [
        "sh",
        "-c",
        f'if [ -e "{marker}" ]; then echo second; else touch "{marker}"; echo first; exit 3; fi',
    ]


async def test_a_job_that_fails_once_succeeds_on_its_retry(
    server: LiveServer, start_agent: StartAgent, shared: Path
) -> None:
    start_agent(server.url, "retrynode")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        retry = {"limit": 2, "backoff_sec": 1}
        job_id = await submit(
            client,
            {"stack": "shell", "command": fails_once(shared / "marker"), "retry": retry},
        )
        done = await wait_phase(client, job_id, "succeeded", "failed")
        assert (done["phase"], done["job_id"], done["retries"]) == ("succeeded", job_id, 1)
        assert done["spec"]["retry"]["limit"] == 2 and done["exit_code"] == 0
        [tried] = done["tries"]
        assert (tried["try"], tried["phase"], tried["exit_code"]) == (1, "failed", 3)
        assert await job_logs(client, job_id, "stdout") == ["first", "second"]
        system = await job_logs(client, job_id, "system")
        assert any(line.startswith("try 1 failed") for line in system), system
        assert any("(try 2) on node" in line for line in system), system

        # limit 0: the first failure ends it
        once = await submit(
            client,
            {
                "stack": "shell",
                "command": fails_once(shared / "other"),
                "retry": {"limit": 0},
            },
        )
        ended = await wait_phase(client, once, "succeeded", "failed")
        assert (ended["phase"], ended["retries"], ended["tries"]) == ("failed", 0, [])


async def test_a_bad_retry_policy_is_a_problem_naming_the_field(server: LiveServer) -> None:
    async with server.client() as client:
        response = await client.post(
            "/v1/jobs", json={"stack": "shell", "command": ["true"], "retry": {"limit": 11}}
        )
        assert response.status_code == 400, response.text  # a body that does not validate
        keys = [e["key"] for e in response.json()["errors"]]
        assert keys == ["retry.limit"], response.json()


async def test_a_pipeline_retry_reruns_only_the_failed_branch(
    server: LiveServer, start_agent: StartAgent, shared: Path
) -> None:
    start_agent(server.url, "pipenode", "--max-concurrency", "4")
    flaky = " ".join(fails_once(shared / "flaky")[2:])
    body: dict[str, Any] = {
        "name": "retry-me",
        "stages": [
            stage("prep", script="echo prep"),
            stage("train", "prep", script=flaky),
            stage("report", "train", script="echo report"),
            stage("lint", script="echo lint"),
        ],
    }
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        run = await create(client, body)
        first = await finished(client, run["pipeline_run_id"])
        assert first["status"] == "failed"
        assert phases(first) == {
            "prep": "succeeded",
            "train": "failed",
            "report": "skipped",
            "lint": "succeeded",
        }
        jobs_before = {s["name"]: s["job_id"] for s in first["stages"]}

        retried = await client.post(f"/v1/pipelines/{run['pipeline_run_id']}/retry")
        assert retried.status_code == 200, retried.text
        assert retried.json()["retries"] == 1 and retried.json()["status"] == "running"
        second = await finished(client, run["pipeline_run_id"])
        assert second["status"] == "succeeded", second
        jobs_after = {s["name"]: s["job_id"] for s in second["stages"]}
        # succeeded stages keep their jobs (and artifacts); the failed branch ran anew
        assert jobs_after["prep"] == jobs_before["prep"]
        assert jobs_after["lint"] == jobs_before["lint"]
        assert jobs_after["train"] != jobs_before["train"] and jobs_before["report"] is None
        assert {s["name"]: s["retry"] for s in second["stages"]} == {
            "prep": 0,
            "train": 1,
            "report": 1,
            "lint": 0,
        }
        # the old try of the stage is still a job of the run, listed with the new one
        listed = (await client.get(f"/v1/jobs?pipeline={run['pipeline_run_id']}")).json()
        ids = {j["job_id"] for j in (listed["items"] if isinstance(listed, dict) else listed)}
        assert jobs_before["train"] in ids and jobs_after["train"] in ids

        # nothing left to retry: a 409 that says so
        again = await client.post(f"/v1/pipelines/{run['pipeline_run_id']}/retry")
        assert again.status_code == 409 and "nothing to retry" in again.json()["detail"]
