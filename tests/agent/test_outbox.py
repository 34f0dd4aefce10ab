"""``runplane.agent.outbox``: ordering, bounds and drop notes, frames, acks; job refs.

Pure bookkeeping, no I/O: reports are put, then drained as the agent's sender would.
"""

from __future__ import annotations

from typing import Any

from runplane.agent import outbox
from runplane.agent.jobref import check_job_ref
from runplane.agent.outbox import Outbox
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


# numbered reports: kept after sending, resent after a reconnect ---------------------------


def numbers(sent: list[Any]) -> list[tuple[str, int | None]]:
    return [(m.type, getattr(m, "n", None)) for m in sent]


def test_reports_are_numbered_per_attempt_only_once_the_server_said_resume() -> None:
    box = Outbox()
    box.put(logs("a", "before"))
    assert numbers(drain(box)) == [("job_logs", None)]  # a server from before resume
    box.numbering = True
    box.put(JobPhase(job_id="a", attempt=1, phase="running"))
    box.put(logs("a", "a1"))
    box.put(JobMetric(job_id="a", attempt=1, values={"x": 1.0}))
    box.put(logs("b", "b1"))
    box.put(logs("a", "a2", attempt=2))
    assert [(m.job_id, m.attempt, *numbers([m])[0]) for m in drain(box)] == [
        ("a", 1, "job_phase", None),  # phases are not numbered
        ("a", 1, "job_logs", 1),
        ("a", 1, "job_metric", 2),
        ("b", 1, "job_logs", 1),
        ("a", 2, "job_logs", 1),
    ]


def test_resume_resends_what_the_server_did_not_store_first_and_in_order() -> None:
    box = Outbox()
    box.numbering = True
    for text in ("l1", "l2", "l3"):
        box.put(logs("a", text))
    assert numbers(drain(box)) == [("job_logs", 1), ("job_logs", 2), ("job_logs", 3)]
    box.put(logs("a", "l4"))
    box.put(JobFinished(job_id="a", attempt=1, outcome="succeeded"))
    box.put(logs("b", "b1"))
    head = box.head()  # l4 in flight when the connection is lost
    assert head is not None and numbers(head[1]) == [("job_logs", 4)]

    # the new session's server stored up to 1 of a, and does not list b
    assert box.resume({("a", 1): 1}) == 2
    sent = drain(box)
    a_sent = [m for m in sent if m.job_id == "a"]
    assert [(m.type, getattr(m, "n", None)) for m in a_sent] == [
        ("job_logs", 2),
        ("job_logs", 3),
        ("job_logs", 4),  # what was in flight, after the resent ones
        ("job_finished", None),
    ]
    assert [m.lines[0][1] for m in a_sent if isinstance(m, JobLogs)] == ["l2", "l3", "l4"]
    box.put(logs("a", "l5"))
    assert numbers(drain(box)) == [("job_logs", 5)]  # numbers go on rising


def test_resume_resends_nothing_the_server_does_not_list_and_ack_forgets_an_attempt() -> None:
    box = Outbox()
    box.numbering = True
    box.put(logs("a", "a1"))
    box.put(logs("b", "b1"))
    box.put(JobFinished(job_id="b", attempt=1, outcome="failed"))
    drain(box)
    assert box.ack(("b", 1))
    assert box.resume({("a", 1): 0, ("b", 1): 0}) == 1  # b's finish was acked: nothing kept
    assert [(m.job_id, m.n) for m in drain(box)] == [("a", 1)]
    assert box.resume({}) == 0  # a not listed (not its current attempt): nothing resent
    assert drain(box) == []
    box.put(logs("a", "a2"))
    assert [m.n for m in drain(box)] == [2]  # the attempt's numbers go on


def test_reports_older_than_the_window_are_not_kept_and_a_resume_says_so() -> None:
    box = Outbox()
    box.numbering = True
    box.put(logs("a", "old"))
    drain(box, now=0.0)
    box.put(logs("a", "new"))
    drain(box, now=outbox.RESEND_WINDOW_SEC + 1)  # "old" leaves the window
    assert box.resume({("a", 1): 0}) == 1
    sent = drain(box, now=outbox.RESEND_WINDOW_SEC + 2)
    assert [(m.n, m.lines[0]) for m in sent] == [
        (2, ("stdout", "new")),
        (3, ("system", sent[1].lines[0][1])),
    ]
    assert sent[1].lines[0][1].startswith("agent could not resend 1 report the server")


def test_kept_reports_are_bounded_like_the_queue() -> None:
    box = Outbox(max_units=3)
    box.numbering = True
    for i in range(5):
        box.put(logs("a", f"l{i}"))
        drain(box)
    assert box.resume({("a", 1): 0}) == 3  # the last 3 lines kept, 2 forgotten
    sent = drain(box)
    assert [m.n for m in sent] == [3, 4, 5, 6]
    assert sent[-1].lines[0][1].startswith("agent could not resend 2 reports")


def test_a_report_numbered_for_a_server_that_was_goes_out_bare_to_one_that_is_not() -> None:
    box = Outbox()
    box.numbering = True
    box.put(logs("a", "x"))
    head = box.head()
    assert head is not None and head[1][0].n == 1
    box.numbering = False  # the next session's server never said resume
    head = box.head()
    assert head is not None and head[1][0].n is None
    assert '"n"' not in head[1][0].model_dump_json()
