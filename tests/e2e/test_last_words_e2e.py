"""A cancelled job keeps its last words and its exit code; a refused agent prints the whole
reason (issue #12 items 4, 5 and 13), with a real server and real agent processes."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from .conftest import LiveServer, StartAgent, online_nodes, submit, wait_for, wait_phase

LAST_WORDS = "trap 'echo last words; exit 143' TERM; echo started; while true; do sleep 0.1; done"


async def _lines(client: httpx.AsyncClient, job_id: str) -> list[str]:
    logs = (await client.get(f"/v1/jobs/{job_id}/logs")).json()["logs"]
    return [entry["line"] for entry in logs]


async def test_cancel_keeps_the_last_words_and_the_exit_code(
    server: LiveServer, start_agent: StartAgent, caplog: pytest.LogCaptureFixture
) -> None:
    start_agent(server.url, "a")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", LAST_WORDS]})
        await wait_phase(client, job_id, "running")

        async def started() -> bool:
            return "started" in await _lines(client, job_id)

        await wait_for(started, 30, "the job to print 'started'")
        with caplog.at_level(logging.DEBUG, logger="runplane.jobs"):
            result = (await client.post(f"/v1/jobs/{job_id}/cancel")).json()
            assert result["cancelled"] is True and result["phase"] == "cancelled"

            async def ended() -> dict[str, Any] | None:
                view = (await client.get(f"/v1/jobs/{job_id}")).json()
                return view if view["exit_code"] is not None else None

            view = await wait_for(ended, 30, "the late finish with the exit code")
        lines = await _lines(client, job_id)
        assert "last words" in lines  # printed by the SIGTERM handler, after the cancel
        assert "the cancelled process ended with exit code 143" in lines
        assert view["phase"] == "cancelled" and view["error"] == "cancelled"
        assert view["exit_code"] == 143 and view["signal"] is None
        # a routine cancel warns about nothing
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert not [r for r in warnings if r.name == "runplane.jobs"], warnings


async def test_a_failed_job_shows_its_exit_code(
    server: LiveServer, start_agent: StartAgent
) -> None:
    start_agent(server.url, "a")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent to come online")
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", "exit 7"]})
        view = await wait_phase(client, job_id, "failed")
        assert view["exit_code"] == 7 and view["signal"] is None
        job_id = await submit(client, {"stack": "shell", "command": ["sh", "-c", "kill -9 $$"]})
        view = await wait_phase(client, job_id, "failed")
        assert view["exit_code"] is None and view["signal"] == "SIGKILL"


async def test_a_refused_agent_prints_the_whole_reason(
    server: LiveServer, start_agent: StartAgent
) -> None:
    """The reason is longer than a close frame holds: the agent prints it whole."""
    agent = start_agent(server.url, "stranger", "--join-token", "rpj_" + "x" * 40)
    code = await wait_for(_exited(agent.proc), 30, "the refused agent to exit")
    assert code == 1
    last = agent.log.read_text().strip().splitlines()[-1]
    whole = (
        "this join token is not known to the server (mistyped, or minted on another "
        "server); ask the operator for a current one (POST /v1/nodes/join-tokens)"
    )
    assert len(whole.encode()) > 123  # more than a WebSocket close reason can carry
    assert last == f"runplane agent: {whole}"


def _exited(proc: Any) -> Any:
    async def check() -> int | None:
        return proc.poll()

    return check
