"""``runplane.agent.outbox``: ordering, bounds and drop notes, frames, acks; job refs.

Pure bookkeeping, no I/O: reports are put, then drained as the agent's sender would.
"""

from __future__ import annotations

from typing import Any

from runplane.agent.outbox import Outbox, check_job_ref
from runplane.agent.protocol import JobFinished, JobLogs, JobMetric, JobPhase


def logs(job: str, *texts: str, attempt: int = 1) -> JobLogs:
    return JobLogs(job_id=job, attempt=attempt, lines=[("stdout", t) for t in texts])


def drain(outbox: Outbox, now: float = 0.0) -> list[Any]:
    out: list[Any] = []
    while (head := outbox.head()) is not None:
        out.extend(head[1])
        outbox.sent(now)
    return out


def test_outbox_keeps_order_within_and_across_jobs() -> None:
    box = Outbox()
    box.put(JobPhase(job_id="a", attempt=1, phase="pulling"))
    box.put(logs("b", "b1"))
    box.put(logs("a", "a1", "a2"))
    box.put(JobMetric(job_id="a", attempt=1, values={"x": 1.0}))
    box.put(logs("b", "b2"))
    sent = drain(box)
    assert [(m.type, m.job_id) for m in sent] == [
        ("job_phase", "a"),
        ("job_logs", "b"),
        ("job_logs", "a"),
        ("job_metric", "a"),
        ("job_logs", "b"),
    ]
    assert box.empty()


def test_outbox_drops_oldest_lines_beyond_the_bound_and_says_so() -> None:
    box = Outbox(max_units=100)
    box.put(JobPhase(job_id="j", attempt=1, phase="pulling"))
    box.put(JobPhase(job_id="j", attempt=1, phase="running"))
    for batch in range(10):
        box.put(logs("j", *(f"line {batch * 25 + i}" for i in range(25))))
    box.put(JobMetric(job_id="j", attempt=1, values={"loss": 1.0}))
    assert box.units(("j", 1)) == 100
    box.put(JobFinished(job_id="j", attempt=1, outcome="succeeded", exit_code=0))
    sent = drain(box)
    assert [m.phase for m in sent[:2]] == ["pulling", "running"]  # phases are never dropped
    assert sent[2].lines == [
        (
            "system",
            "agent dropped 151 log lines of this job: too much output buffered "
            "while disconnected from the server",
        )
    ]
    texts = [t for m in sent[3:] if isinstance(m, JobLogs) for _, t in m.lines]
    assert texts == [f"line {i}" for i in range(151, 250)]
    assert isinstance(sent[-2], JobMetric)
    assert isinstance(sent[-1], JobFinished)
    assert box.dropped_lines == 151


def test_outbox_drops_metrics_too_and_bounds_bytes() -> None:
    box = Outbox(max_units=3, max_bytes=10**6)
    for step in range(5):
        box.put(JobMetric(job_id="j", attempt=1, step=step, values={"x": float(step)}))
    sent = drain(box)
    assert "2 metric points" in sent[0].lines[0][1]
    assert [m.step for m in sent[1:]] == [2, 3, 4]

    box = Outbox(max_bytes=1000)
    box.put(logs("j", *("x" * 100 for _ in range(30))))
    assert box.units(("j", 1)) == 10
    assert box.dropped_lines == 20


def test_outbox_splits_big_batches_into_frames() -> None:
    box = Outbox(frame_text=1000)
    box.put(logs("j", *("y" * 300 for _ in range(10))))
    sent = drain(box)
    assert [len(m.lines) for m in sent] == [3, 3, 3, 1]


def test_outbox_keeps_finishes_until_acked() -> None:
    box = Outbox()
    fin = JobFinished(job_id="j", attempt=2, outcome="failed", exit_code=1)
    box.put(fin)
    assert drain(box, now=5.0) == [fin]
    assert box.unacked() == [("j", 2)]
    assert box.requeue_unacked(sent_before=4.0) == 0  # sent too recently
    assert box.requeue_unacked() == 1
    assert drain(box, now=6.0) == [fin]
    assert box.requeue_unacked() == 1
    assert box.ack(("j", 2))  # the queued copy goes too
    assert box.empty() and box.unacked() == []
    assert not box.ack(("j", 2))


def test_check_job_ref() -> None:
    assert check_job_ref("job_01HX-a.b", 1) is None
    assert "invalid job id" in (check_job_ref("../etc", 1) or "")
    assert "invalid job id" in (check_job_ref("a/b", 1) or "")
    assert "invalid attempt" in (check_job_ref("job_1", 0) or "")
