"""A preemption's cancel on the agent (docs/agent.md, docs/jobs.md "Preemption"): the
fields are sent only when set, the checkpoint hint is written where
``$RUNPLANE_PREEMPT_FILE`` says, and the cancel's own grace replaces the agent's."""

from __future__ import annotations

import json
from pathlib import Path

import trio

from runplane.agent import protocol as p
from runplane.agent.core import Stop
from runplane.agent.execspec import PREEMPT_ENV, PREEMPT_FILE, ExecSpec, note_preempted
from runplane.agent.executor import Finished, run_job


def test_a_plain_cancel_reads_as_before_and_a_preemptions_carries_its_fields() -> None:
    plain = json.loads(p.Cancel(job_id="job_1", attempt=2).model_dump_json())
    assert plain == {"type": "cancel", "job_id": "job_1", "attempt": 2}
    order = p.Cancel(job_id="job_1", attempt=2, grace_sec=5, preempted_by="job_hi")
    sent = json.loads(order.model_dump_json())
    assert (sent["grace_sec"], sent["preempted_by"]) == (5, "job_hi")


def test_the_hint_is_written_into_the_work_dir(tmp_path: Path) -> None:
    note_preempted(tmp_path, "job_hi", 30)
    text = (tmp_path / PREEMPT_FILE).read_text()
    assert text.startswith("preempted by job_hi at ") and text.endswith(", grace 30 s\n")
    note_preempted(tmp_path / "gone", "job_hi", 30)  # no directory: nothing, no error


async def test_the_cancels_grace_replaces_the_agents(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    # ignores SIGTERM: only the SIGKILL after the grace ends it
    command = ["sh", "-c", f'trap "" TERM; echo "${PREEMPT_ENV}"; sleep 600 & wait; sleep 600']
    spec = ExecSpec(job_id="job_1", command=command, env={}, workdir=workdir, grace_sec=600)
    lines: list[str] = []
    started = trio.Event()

    async def report(event: object) -> None:
        text = getattr(event, "lines", None)
        if text:
            lines.extend(line for _, line in text)
            started.set()

    stop = Stop()
    result: list[Finished] = []

    async def job() -> None:
        result.append(await run_job(spec, report, stop))

    with trio.fail_after(60):  # the agent's own grace would be 600 s
        async with trio.open_nursery() as nursery:
            nursery.start_soon(job)
            await started.wait()
            stop.grace = 0.2
            stop.set()
    [finished] = result
    assert finished.outcome == "cancelled" and finished.signal == "SIGKILL"
    assert str(workdir.absolute() / PREEMPT_FILE) in lines
