"""Org secrets on a real agent: a job's env references ``${secrets.TOKEN}``; the value
reaches the process for that attempt only, and the agent masks it (``***``) in the log
lines and stream chunks it reports; it is nowhere in the job's view, the recording or the
server's database files (docs/secrets.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    ADMIN,
    LiveServer,
    StartAgent,
    job,
    job_logs,
    online_nodes,
    submit,
    wait_for,
    wait_phase,
)

ADMIN_H = {"Authorization": f"Bearer {ADMIN}"}
VALUE = "s3cr3t-token-of-the-e2e-0123456789"
SCRIPT = (
    'echo "token is $T"; echo "length ${#T}"; '
    'printf "{\\"t\\": \\"%s\\"}\\n" "$T" >> "$RUNPLANE_STREAMS_DIR/probe"'
)


def files_containing(top: Path, needle: bytes) -> list[Path]:
    return [p for p in top.rglob("*") if p.is_file() and needle in p.read_bytes()]


async def test_a_secret_reaches_the_job_and_is_masked_everywhere(
    server: LiveServer, start_agent: StartAgent, data_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    agent = start_agent(server.url, "secretnode")
    async with server.client() as client:
        put = await client.put(
            "/v1/secrets/TOKEN?org=org_default", json={"value": VALUE}, headers=ADMIN_H
        )
        assert put.status_code == 201, put.text
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        job_id = await submit(
            client,
            {"stack": "shell", "command": ["sh", "-c", SCRIPT], "env": {"T": "${secrets.TOKEN}"}},
        )
        done = await wait_phase(client, job_id, "succeeded", "failed")
        assert done["phase"] == "succeeded", done
        out = await job_logs(client, job_id, "stdout")
        assert out == ["token is ***", f"length {len(VALUE)}"]  # the process had the value
        recording = (await client.get(f"/v1/jobs/{job_id}/recording")).json()
        points = [p["data"] for p in recording["stream_points"]]
        assert points and all("***" in json.dumps(d) for d in points), points
        view = await job(client, job_id)
        assert view["spec"]["env"]["T"] == "${secrets.TOKEN}"
        everything = json.dumps([view, recording, await job_logs(client, job_id, "stdout")])
        assert VALUE not in everything
    assert files_containing(data_dir, VALUE.encode()) == []
    assert not [r for r in caplog.records if VALUE in r.getMessage() or VALUE in str(r.__dict__)]
    agent.terminate()
    assert VALUE.encode() not in agent.log.read_bytes()
    assert files_containing(agent.data_dir, VALUE.encode()) == []


PLAIN = "plain-api-key-in-the-env-9876543210"


async def test_a_plain_secret_looking_env_value_is_sealed_at_rest_and_masked(
    server: LiveServer, start_agent: StartAgent, data_dir: Path
) -> None:
    """``API_KEY`` given as a plain value (no ``${secrets.}``): the process gets it, its
    log shows ``***``, the view ``[redacted]``, and no file of the server holds it; a rerun
    runs with it too (opened and sealed afresh)."""
    agent = start_agent(server.url, "plainnode")
    script = 'echo "key is $API_KEY"; echo "length ${#API_KEY}"'
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        body = {"stack": "shell", "command": ["sh", "-c", script], "env": {"API_KEY": PLAIN}}
        first = await submit(client, body)
        rerun = None
        for job_id in (first, "rerun"):
            if job_id == "rerun":
                answer = await client.post(f"/v1/jobs/{first}/rerun")
                assert answer.status_code == 202, answer.text
                job_id = rerun = answer.json()["job_id"]
            done = await wait_phase(client, job_id, "succeeded", "failed")
            assert done["phase"] == "succeeded", done
            out = await job_logs(client, job_id, "stdout")
            assert out == ["key is ***", f"length {len(PLAIN)}"]
            view = await job(client, job_id)
            assert view["spec"]["env"]["API_KEY"] == "[redacted]"
        first_view, rerun_view = await job(client, first), await job(client, str(rerun))
        assert first_view["spec_hash"] == rerun_view["spec_hash"]  # hashed plain, both times
    assert files_containing(data_dir, PLAIN.encode()) == []
    agent.terminate()
    assert files_containing(agent.data_dir, PLAIN.encode()) == []
