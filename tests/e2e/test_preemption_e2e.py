"""Preemption on a real agent (docs/placement.md "Preemption"): two low-priority
preemptible sleepers fill a node of 2 slots; a high-priority job arrives and is running
within grace + 2 s; the victim got SIGTERM first (its trap copies the checkpoint hint,
``$RUNPLANE_PREEMPT_FILE``, into a shared directory), went back to the queue counted in
``preemptions`` (not in ``attempts``) with a ``preempted`` event naming the preemptor,
and finishes later. Non-preemptible sleepers in the same position are left alone and
the high job waits with a reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.e2e.conftest import (
    LiveServer,
    StartAgent,
    job,
    online_nodes,
    submit,
    wait_for,
    wait_phase,
)
from tests.e2e.test_jobs_e2e import _sse_events

GRACE = 1


def sleeper(marker: Path) -> list[str]:
    """Sleeps until SIGTERM, when its trap saves the preemption hint to ``marker``; an
    attempt that finds ``marker`` (the one after its preemption) ends after 2 s."""
    script = (
        f'if [ -e "{marker}" ]; then sleep 2; exit 0; fi; '
        f'trap \'cat "$RUNPLANE_PREEMPT_FILE" > "{marker}"; exit 143\' TERM; '
        "sleep 600 & wait"
    )
    return ["sh", "-c", script]


def low(marker: Path, *, preemptible: bool) -> dict[str, Any]:
    return {
        "stack": "shell",
        "command": sleeper(marker),
        "priority": 10,
        "preemptible": preemptible,
        "preempt_grace_sec": GRACE,
    }


async def fill(client: httpx.AsyncClient, shared: Path, *, preemptible: bool) -> list[str]:
    lows = [
        await submit(client, low(shared / f"{name}-term", preemptible=preemptible))
        for name in ("a", "b")
    ]
    for job_id in lows:
        await wait_phase(client, job_id, "running")
    return lows


async def test_a_high_job_preempts_a_low_one_which_comes_back_and_finishes(
    server: LiveServer, start_agent: StartAgent, shared: Path
) -> None:
    start_agent(server.url, "preemptnode", "--max-concurrency", "2")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        low_a, low_b = await fill(client, shared, preemptible=True)
        high = await submit(
            client, {"stack": "shell", "command": ["sh", "-c", "echo urgent"], "priority": 200}
        )
        # the bound of the issue, as a wait limit: running (or done) within grace + 2 s
        await wait_phase(client, high, "running", "succeeded", within=GRACE + 2)
        done = await wait_phase(client, high, "succeeded", "failed")
        assert done["phase"] == "succeeded"

        # the latest low job was the victim: SIGTERM first (its trap saved the hint) ...
        victim = await job(client, low_b)
        assert victim["preemptions"] == 1 and victim["attempts"] == 0
        hint = (shared / "b-term").read_text()
        assert hint.startswith(f"preempted by {high} at ") and f"grace {GRACE} s" in hint
        assert not (shared / "a-term").exists()
        # ... it went back to the queue with an event naming its preemptor, and finishes
        ended = await wait_phase(client, low_b, "succeeded", "failed", "cancelled")
        assert (ended["phase"], ended["attempt"], ended["preemptions"]) == ("succeeded", 2, 1)
        events = await job_events(client, low_b)
        preempted = [e for e in events if e.get("reason") == "preempted"]
        assert [(e["phase"], e["by"]) for e in preempted] == [("queued", high)]
        # the other low job was never touched
        other = await job(client, low_a)
        assert (other["phase"], other["preemptions"]) == ("running", 0)
        await client.post(f"/v1/jobs/{low_a}/cancel")

        metrics = (await client.get("/metrics")).text
        assert "runplane_preemptions_total 1.0" in metrics


async def test_non_preemptible_jobs_are_left_alone_and_the_high_job_waits(
    server: LiveServer, start_agent: StartAgent, shared: Path
) -> None:
    start_agent(server.url, "fixednode", "--max-concurrency", "2")
    async with server.client() as client:
        await wait_for(lambda: online_nodes(client), 30, "the agent")
        lows = await fill(client, shared, preemptible=False)
        high = await submit(
            client, {"stack": "shell", "command": ["sh", "-c", "echo urgent"], "priority": 200}
        )

        async def waiting_reason() -> str | None:
            view = await job(client, high)
            return view.get("wait_reason") if view["phase"] == "queued" else None

        reason = await wait_for(waiting_reason, 30, "the high job's wait reason")
        assert "preempting" not in reason and "slot" in reason, reason
        for job_id in lows:
            view = await job(client, job_id)
            assert (view["phase"], view["preemptions"]) == ("running", 0)
        assert not any((shared / f"{n}-term").exists() for n in "ab")  # no SIGTERM came
        for job_id in (*lows, high):
            await client.post(f"/v1/jobs/{job_id}/cancel")


async def job_events(client: httpx.AsyncClient, job_id: str) -> list[dict[str, Any]]:
    """The phase events of an ended job (its event stream, replayed to its end)."""
    text = (await client.get(f"/v1/jobs/{job_id}/events")).text
    return [e for e in _sse_events(text) if e["kind"] == "phase"]
