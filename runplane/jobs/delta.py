"""What a job's transition writes beside its new state, pure: the row's columns and the
events, numbered on from the job's last seq (``row_delta``). The job actor
(``runplane/actors/job.py``) stores them with the state in one transaction and keeps what
the delta says it now holds (seq, row, metrics)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from runplane.jobs.events import StoredEvent, phase_event, system_line_event
from runplane.jobs.phase import Effect, Finished, JobState, Phase, Preempted
from runplane.jobs.phase import Event as PhaseEvent
from runplane.jobs.reports import attempt_note
from runplane.jobs.rows import JobRow
from runplane.persistence import to_json
from runplane.timefmt import iso_ms

#: Log lines one job may keep; past it lines are counted, not stored, and a system line says so.
LOG_CAP = 50_000


@dataclass(frozen=True, slots=True)
class Held:
    """What the job's actor holds beside its state that a transition writes from."""

    row: JobRow
    seq: int
    final_metrics: dict[str, float]
    log_lines: int
    log_dropped: int
    #: what came with an agent's report being applied: the finish's checked artifacts and
    #: how its process ended (exit code, signal); the GPUs reported with a phase
    artifacts: list[dict[str, Any]] | None = None
    exit: tuple[int | None, str | None] | None = None
    gpus: tuple[str, ...] | None = None


@dataclass(slots=True)
class Delta:
    """The columns and events to store with the new state, and what the actor holds
    after: its last seq, its row (tries, retries, GPUs), its try's metrics."""

    row: JobRow
    seq: int
    final_metrics: dict[str, float]
    columns: dict[str, Any] = field(default_factory=dict)
    events: list[StoredEvent] = field(default_factory=list)

    def line(self, text: str, now: int) -> None:
        self.seq += 1
        self.events.append(system_line_event(self.row.id, self.seq, text, now))


def row_delta(
    held: Held,
    before: JobState,
    after: JobState,
    event: PhaseEvent,
    effects: tuple[Effect, ...],
    now: int,
) -> Delta:
    """What the transition ``before`` -> ``after`` (by ``event``, with ``effects``) writes;
    ``now`` is the transition's clock reading."""
    delta = Delta(held.row, held.seq, dict(held.final_metrics))
    if after.preemptions != before.preemptions:
        delta.row = replace(delta.row, preemptions=after.preemptions)
    if after.attempt != before.attempt:  # reports are numbered per attempt
        delta.columns["report_n"] = 0
    if after.phase.terminal:
        _terminal_columns(held, delta, now)
    retrying = Effect.RETRY_LATER in effects and isinstance(event, Finished)
    _transition_events(before, after, event, delta, retrying, now)
    wait_reason = None
    if retrying:
        assert isinstance(event, Finished)
        wait_reason = _retry_columns(held, before, after, event, delta, now)
    _queue_columns(held, after, delta, wait_reason)
    return delta


def _terminal_columns(held: Held, delta: Delta, now: int) -> None:
    """The columns an ending stores: metrics, artifacts, how the process ended, the log
    counts (lines past the cap wrote nothing while they arrived)."""
    columns = delta.columns
    columns["final_metrics"] = to_json(held.final_metrics)
    if held.artifacts is not None:
        columns["artifacts"] = to_json(held.artifacts)
    if held.exit is not None:
        columns["exit_code"], columns["signal"] = held.exit
    columns["log_lines"], columns["log_dropped"] = held.log_lines, held.log_dropped
    if held.log_dropped:
        dropped = held.log_dropped
        delta.line(f"log truncated: {dropped} lines after the first {LOG_CAP} were not kept", now)


def _transition_events(
    before: JobState,
    after: JobState,
    event: PhaseEvent,
    delta: Delta,
    retrying: bool,
    now: int,
) -> None:
    """The ``phase`` event of a new phase, then the attempt's system line, if any."""
    if after.phase is not before.phase:
        delta.seq += 1
        retry = after.retries if retrying else 0
        placed = None
        if after.phase is Phase.ASSIGNED and after.node_id is not None:
            placed = (after.node_id, after.attempt)
        job_id, phase = delta.row.id, after.phase.value
        by = event.by if isinstance(event, Preempted) else None
        delta.events.append(
            phase_event(job_id, delta.seq, phase, now, after.error, retry, placed, by)
        )
    note = attempt_note(before, after, event)
    if note is not None:
        delta.line(note, now)


def _retry_columns(
    held: Held, before: JobState, after: JobState, event: Finished, delta: Delta, now: int
) -> str:
    """A try that ends in a retry: its record kept, the next try's metrics fresh; the wait
    reason while its backoff runs."""
    tries = (*held.row.tries, _try_record(held, before, after, event, now))
    delta.columns["tries"] = to_json(list(tries))
    delta.row = replace(delta.row, tries=tries, retries=after.retries)
    delta.final_metrics = {}  # the next try's own; the record keeps this one's
    delta.columns["final_metrics"] = "{}"
    until = iso_ms(after.retry_at or now)
    return f"retry {after.retries}: waiting out its backoff until {until}"


def _try_record(
    held: Held, before: JobState, after: JobState, event: Finished, now: int
) -> dict[str, Any]:
    """The outcome of the try a retry follows, as the view's ``tries`` lists it."""
    exit_code, signal = held.exit or (None, None)
    return {
        "try": after.retries,
        "attempt": before.attempt,
        "node_id": before.node_id,
        "phase": event.outcome.value,
        "error": event.error or "",
        "exit_code": exit_code,
        "signal": signal,
        "started_at": before.started_at,
        # the transition's own clock reading (its retry_at is this plus the backoff), not
        # a later one: the backoff is measured from when the try was seen to end
        "finished_at": (after.retry_at or now) - (event.retry_in_ms or 0),
        "final_metrics": dict(held.final_metrics),
        "artifacts": list(held.artifacts or ()),
    }


def _queue_columns(held: Held, after: JobState, delta: Delta, wait_reason: str | None) -> None:
    """Back in the queue: its wait reason, its GPUs gone; on a node: the GPUs the agent
    reported with the phase."""
    if after.phase is Phase.QUEUED:
        delta.columns["wait_reason"] = wait_reason
        if held.row.gpus:
            delta.columns["gpus"] = None
            delta.row = replace(delta.row, gpus=())
    elif held.gpus is not None:
        delta.columns["gpus"] = to_json(list(held.gpus))
        delta.row = replace(delta.row, gpus=held.gpus)
