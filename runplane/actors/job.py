"""The job actor: one per live job, owning its phase machine (``runplane/jobs/phase.py``).

Every transition and every telemetry batch is written to the store before it is published
on the job's ring (``job/<id>`` in the hub), so an SSE subscriber replaying from the store
and then following the ring sees every event exactly once. Terminal jobs passivate: a
million finished jobs are rows, not tasks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, assert_never

from runplane.actors.job_deps import JobDeps
from runplane.actors.job_gang import run_ranks, stop_ranks
from runplane.actors.job_messages import (
    AgentFinished,
    AgentLogs,
    AgentMetric,
    AgentPhase,
    AgentStream,
    Assign,
    AssignAnswer,
    BackoffOver,
    Cancel,
    CancelOutcome,
    JobMsg,
    LoseAttempt,
    OpenStream,
    OrderUndelivered,
    Preempt,
    SendTeleop,
    SetPriority,
    TeleopOrder,
    WaitReason,
)
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.jobs.delta import LOG_CAP, Delta, Held, row_delta
from runplane.jobs.events import (
    JobEvent,
    StoredEvent,
    log_event,
    metric_event,
    ring_name,
    system_line_event,
    wait_reason_event,
)
from runplane.jobs.phase import (
    Assigned,
    CancelRequested,
    Effect,
    Finished,
    InvalidTransition,
    JobState,
    NodeLost,
    Phase,
    Preempted,
    Pulling,
    RetryDue,
    Running,
    StaleAttempt,
    Undelivered,
    transition,
)
from runplane.jobs.phase import Event as PhaseEvent
from runplane.jobs.reports import checked_artifacts
from runplane.jobs.rows import JobRow
from runplane.jobs.spec import retry_policy
from runplane.jobs.transitions import JobTransitioned
from runplane.nodes.status import AttemptOutcome
from runplane.persistence import now_ms, to_json
from runplane.runtime import Actor, Ring
from runplane.streams.acks import AckKey
from runplane.streams.job_streams import JobStreams

log = logging.getLogger("runplane.jobs")


class JobActor(Actor[JobMsg]):
    def __init__(self, deps: JobDeps, row: JobRow) -> None:
        self.deps = deps
        #: the row as activated (``priority`` kept current); ``state`` holds the phase
        self.row = row
        self.id = row.id
        self.state = JobState(
            phase=row.phase,
            attempt=row.attempt,
            attempts=row.attempts,
            node_id=row.node_id,
            error=row.error,
            started_at=row.started_at,
            finished_at=row.finished_at,
            retries=row.retries,
            retry_at=row.retry_at,
            preemptions=row.preemptions,
            ranks=row.ranks,
            master_port=row.master_port,
        )
        self.seq = row.event_seq
        self.log_lines = row.log_lines
        self.log_dropped = row.log_dropped
        #: the last numbered agent report of this attempt taken (stored with what it wrote)
        self.report_n = row.report_n
        #: a gang's: the last numbered report of each (attempt, rank) taken
        self.rank_reports: dict[tuple[int, int], int] = {}
        #: a gang's: the artifacts rank 0 uploaded (the only rank that collects outputs)
        self.rank0_artifacts: list[dict[str, Any]] | None = None
        self.final_metrics = dict(row.final_metrics)  # grows with metrics: not the row's
        #: the wait reason last stored (a queued job's), so a repeat stores nothing
        self.wait_reason = row.wait_reason if row.phase is Phase.QUEUED else None
        self._finish_artifacts: list[dict[str, Any]] | None = None
        self._finish_exit: tuple[int | None, str | None] | None = None
        self._gpus: tuple[str, ...] | None = None  # reported with the phase being applied
        self.exit_code: int | None = row.exit_code
        self.signal: str | None = row.signal
        #: (attempt, preemptor) while a preemption stops the attempt: its end requeues it
        self.preempting: tuple[int, str] | None = None
        self.ring: Ring[JobEvent] = self._ring()
        self.streams = JobStreams(
            self.id,
            deps.store,
            deps.hub,
            declared=deps.streams.kinds(row.stack),
            saved=row.streams,
            ring_capacity=deps.streams.ring,
            counters=deps.streams.counters,
        )

    def _ring(self) -> Ring[JobEvent]:
        name = ring_name(self.id)
        ring = self.deps.hub.find_ring(name)
        if ring is not None and ring.last_seq != self.seq:
            self.deps.hub.discard_ring(name)  # out of step with the store: start afresh
            ring = None
        return ring or self.deps.hub.ring(name, next_seq=self.seq + 1)

    async def on_start(self) -> None:
        """Everything the actor holds was loaded from its row by the activation (a restart
        after a crash loads it again): a queued job (re-)enters the queue (placement keys
        its queue by job id, so a repeat is harmless); a terminal one closes its ring."""
        if self.state.phase is Phase.QUEUED and self.state.retry_at is not None:
            self._await_backoff()  # placement's rebuild left it out: it is not due yet
        elif self.state.phase is Phase.QUEUED:
            await self.deps.placement.enqueue(self.row)
        if self.state.phase.terminal:
            self.ring.close()
            self.streams.close()

    def can_passivate(self) -> bool:
        """Terminal jobs, and queued ones not waiting out a retry's backoff (its timer
        lives here) and nobody follows: a queued job is its row plus placement's queue
        entry, so 100,000 queued jobs are not 100,000 tasks. Placement's assignment, a
        cancel or a follower activates it again from the row."""
        phase = self.state.phase
        if phase is Phase.QUEUED:  # a followed one stays, to store its wait reasons
            return self.state.retry_at is None and not self.ring.subscribers
        return phase.terminal

    async def on_stop(self) -> None:
        # a queued job's ring nobody follows goes with the actor; a followed one stays
        # (the next activation numbers on from it: its last seq is the row's)
        if self.state.phase is Phase.QUEUED and not self.ring.subscribers:
            self.deps.hub.discard_ring(ring_name(self.id))

    # -- handling -----------------------------------------------------------------------

    async def handle(self, msg: JobMsg) -> object:
        match msg:
            case Assign():
                return await self._on_assign(msg)
            case AgentPhase():
                return await self._on_agent_phase(msg)
            case AgentLogs():
                return await self._on_agent_logs(msg)
            case AgentMetric():
                return await self._on_agent_metric(msg)
            case AgentFinished():
                return await self._on_agent_finished(msg)
            case AgentStream():
                return await self._on_agent_stream(msg)
            case LoseAttempt(attempt, reason):
                return await self._apply(NodeLost(attempt, reason)) is not None
            case OrderUndelivered(attempt, reason, counted):
                return await self._apply(Undelivered(attempt, reason, counted)) is not None
            case Cancel():
                return await self._cancel()
            case Preempt(by, grace_sec):
                return await self._preempt(by, grace_sec)
            case WaitReason(reason):
                return await self._wait_reason(reason)
            case BackoffOver():
                return await self._on_backoff_over(msg)
            case OpenStream(stream):
                return None if self.state.phase.terminal else self.streams.ring(stream)
            case SendTeleop(stream, frame):
                return await self._teleop(stream, frame)
            case SetPriority():
                return await self._on_set_priority(msg)
            case _:
                assert_never(msg)  # a new message must be handled (mypy says where)

    # -- one method per message ----------------------------------------------------------

    async def _on_assign(self, msg: Assign) -> AssignAnswer:
        if await self._apply(Assigned(msg.node_id, msg.ranks, msg.master_port)) is None:
            on_node = self.state.node_id if self.state.phase.on_node else None
            return AssignAnswer(taken=False, on_node=on_node)
        return AssignAnswer(taken=True)

    async def _on_agent_phase(self, msg: AgentPhase) -> bool:
        if not self._from_current_node(msg.node_id, msg.attempt):
            return False
        attempt, rank = msg.attempt, self._rank(msg.node_id)
        event: PhaseEvent = (
            Pulling(attempt, rank) if msg.phase is Phase.PULLING else Running(attempt, rank)
        )
        self._gpus = msg.gpus or None
        try:
            return await self._apply(event) is not None
        finally:
            self._gpus = None

    async def _on_agent_logs(self, msg: AgentLogs) -> bool:
        if not self._from_current_node(msg.node_id, msg.attempt):
            return False
        if self.state.phase.terminal and not self._after_cancel():
            return False
        rank, n = self._ranked(msg.node_id, msg.attempt, msg.report.n)
        if not self._stored(n):
            # after a cancel: the process's last words
            await self._logs(msg.report.lines, n, rank)
        return True

    async def _on_agent_metric(self, msg: AgentMetric) -> bool:
        if not self._from_current_node(msg.node_id, msg.attempt) or self.state.phase.terminal:
            return False
        report = msg.report
        rank, n = self._ranked(msg.node_id, msg.attempt, report.n)
        if not self._stored(n):
            await self._metric(report.step, report.values, n, rank)
        return True

    async def _on_agent_finished(self, msg: AgentFinished) -> bool:
        if not self._from_current_node(msg.node_id, msg.attempt):
            return False
        report = msg.report
        if self._after_cancel():
            return await self._late_finish(report.final_metrics, report.exit_code, report.signal)
        preempting = self.preempting
        if preempting is not None and preempting[0] == msg.attempt:
            self.preempting = None
            if msg.outcome is not Phase.SUCCEEDED:  # one that made it first succeeded
                return await self._apply(Preempted(msg.attempt, preempting[1])) is not None
        self.final_metrics.update(report.final_metrics)
        self._finish_artifacts = checked_artifacts(self.id, report.artifacts)
        self._finish_exit = (report.exit_code, report.signal)
        outcome, rank = msg.outcome, self._rank(msg.node_id)
        if self.state.ranks:  # a gang keeps rank 0's outputs, whichever rank ends it
            if rank == 0:
                self.rank0_artifacts = self._finish_artifacts
            self._finish_artifacts = self.rank0_artifacts
        retry = self._retry_in_ms(outcome)
        finished = Finished(msg.attempt, outcome, report.error, retry, rank)
        try:
            return await self._apply(finished) is not None
        finally:
            self._finish_artifacts = None
            self._finish_exit = None

    async def _on_agent_stream(self, msg: AgentStream) -> bool:
        if not self._from_current_node(msg.node_id, msg.attempt) or self.state.phase.terminal:
            return False
        await self.streams.receive(msg.report.stream, msg.report.chunks)
        return True

    async def _on_backoff_over(self, msg: BackoffOver) -> bool:
        if self.state.retry_at is None or msg.retries != self.state.retries:
            return False  # cancelled meanwhile, or a stale timer
        return await self._apply(RetryDue(msg.retries)) is not None

    async def _on_set_priority(self, msg: SetPriority) -> bool:
        await repo.set_priority(self.deps.store, self.id, msg.priority)
        self.row = replace(self.row, priority=msg.priority)
        if self.state.phase is Phase.QUEUED:
            await self.deps.placement.reprioritize(self.id, msg.priority)
        return True

    def _retry_in_ms(self, outcome: Phase) -> int | None:
        """The backoff before another try when the retry policy allows one after a try
        ending in ``outcome``; None when the outcome ends the job."""
        policy = retry_policy(self.row.spec)
        if policy is None or outcome not in policy.on or self.state.retries >= policy.limit:
            return None
        return int(policy.delay_sec(self.state.retries) * 1000)

    def _await_backoff(self) -> None:
        """Wake the job when its retry's backoff is over (restarted: what is left of it)."""
        left = max(0, (self.state.retry_at or 0) - now_ms()) / 1000
        self.context.tell_after(left, BackoffOver(self.state.retries))

    def _rank(self, node_id: str) -> int:
        """The rank whose node sent a report (0: a plain job's node)."""
        return self.state.rank_of(node_id) or 0

    def _ranked(self, node_id: str, attempt: int, n: int | None) -> tuple[int | None, int | None]:
        """A report's rank (what a gang's log entries and metrics carry; None: a plain
        job) and its number as ``_stored`` reads it. Each rank's agent numbers its own
        reports: a gang's are told apart here, per rank (in memory: a server restart
        forgets them, and a rank's resent reports may then be stored again), so -1 for a
        rank's repeat, None for its new report."""
        rank = self.state.rank_of(node_id)
        if rank is None or n is None:
            return rank, n
        last = self.rank_reports.get((attempt, rank), 0)
        if n <= last:
            return rank, -1
        self.rank_reports[(attempt, rank)] = n
        return rank, None

    def _from_current_node(self, node_id: str, attempt: int) -> bool:
        """Fencing by (attempt, node): a gang's report comes from one of its rank nodes."""
        on = node_id == self.state.node_id or self.state.rank_of(node_id) is not None
        if not on or attempt != self.state.attempt:
            log.warning(
                "stale agent report refused",
                extra={
                    "job_id": self.id,
                    "node_id": node_id,
                    "attempt": attempt,
                    "current_attempt": self.state.attempt,
                    "current_node": self.state.node_id,
                },
            )
            return False
        return True

    def _after_cancel(self) -> bool:
        """Cancelled while on a node: the attempt's process may still be ending. Its last
        output and its finish (exit code, signal) are recorded after the terminal phase
        event (stored, so ``/logs`` shows them; the SSE stream has ended at the phase)."""
        return self.state.phase is Phase.CANCELLED and self.state.node_id is not None

    async def _late_finish(
        self, final_metrics: dict[str, float], exit_code: int | None, signal: str | None
    ) -> bool:
        """The finish of a cancelled attempt: expected, so recorded quietly (a resend of
        the same finish writes nothing)."""
        recorded = self.exit_code is not None or self.signal is not None
        if recorded and (exit_code, signal) == (self.exit_code, self.signal):
            return True
        self.final_metrics.update(final_metrics)
        how = f"exit code {exit_code}" if signal is None else f"signal {signal}"
        events: list[StoredEvent] = []
        self._system_line(events, f"the cancelled process ended with {how}")
        await self.deps.store.transaction(
            repo.save_state(
                self.id,
                self.state,
                events,
                self.seq,
                exit_code=exit_code,
                signal=signal,
                final_metrics=to_json(self.final_metrics),
            )
        )
        self.exit_code, self.signal = exit_code, signal
        self._publish(events)
        log.debug("late finish after a cancel recorded", extra={"job_id": self.id, "how": how})
        return True

    async def _cancel(self) -> CancelOutcome:
        if self.state.phase.terminal:
            return CancelOutcome(cancelled=False, killed_on_node=False)
        node, attempt, ranks = self.state.node_id, self.state.attempt, self.state.ranks
        effects = await self._apply(CancelRequested()) or ()
        killed = False
        if Effect.CANCEL_ON_NODE in effects and node is not None:
            nodes = [r.node_id for r in ranks] or [node]  # a gang: every rank stops
            for target in nodes:
                order = self.deps.node.cancel_order(self.id, attempt)
                killed = await self.deps.node.deliver(target, order) or killed
        return CancelOutcome(cancelled=True, killed_on_node=killed)

    async def _preempt(self, by: str, grace_sec: int) -> bool:
        """Stop the attempt for ``by`` (SIGTERM, SIGKILL after ``grace_sec``; the agent
        writes the checkpoint hint first): its finish then requeues the job."""
        node, attempt = self.state.node_id, self.state.attempt
        if not self.state.phase.on_node or node is None or self.preempting is not None:
            return False
        self.preempting = (attempt, by)
        events: list[StoredEvent] = []
        self._system_line(events, f"preempted by {by}: SIGTERM, then SIGKILL after {grace_sec} s")
        await self.deps.store.transaction(repo.save_state(self.id, self.state, events, self.seq))
        self._publish(events)
        order = p.Cancel(job_id=self.id, attempt=attempt, grace_sec=grace_sec, preempted_by=by)
        return await self.deps.node.deliver(node, order)

    async def _apply(self, event: PhaseEvent) -> tuple[Effect, ...] | None:
        """Apply ``event`` to the phase machine: store the new state with its events (and
        the transition's in-transaction parts), publish them, tell the transition's
        subscribers, run the effects. None when the machine refused it."""
        before = self.state
        try:
            after, effects = transition(before, event, now_ms())
        except (InvalidTransition, StaleAttempt) as exc:
            self._log_refused(before, exc)
            return None
        delta = self._delta(before, after, event, effects)
        moved = self._transitioned(before, after)
        await self.deps.store.transaction(
            repo.save_state(
                self.id,
                after,
                delta.events,
                self.seq,
                ended_org=self.row.org_id if moved.ends else None,
                also=self.deps.transitions.tx_part(moved),
                **delta.columns,
            )
        )
        self.state = after
        if after.phase is Phase.QUEUED:
            self.wait_reason = delta.columns.get("wait_reason")
        self._publish(delta.events, terminal=moved.ends)
        await self.deps.transitions.published(moved)
        log.info(
            "job phase",
            extra={
                "job_id": self.id,
                "from": before.phase.value,
                "to": after.phase.value,
                "attempt": after.attempt,
                "node_id": after.node_id or before.node_id,
            },
        )
        await self._effects(before, after, effects)
        if after.phase.terminal:
            self.ring.close()
            self.streams.close()
        return effects

    def _delta(
        self, before: JobState, after: JobState, event: PhaseEvent, effects: tuple[Effect, ...]
    ) -> Delta:
        """What the transition writes (``jobs/delta.py``); the actor holds what it says."""
        held = Held(
            self.row,
            self.seq,
            self.final_metrics,
            self.log_lines,
            self.log_dropped,
            artifacts=self._finish_artifacts,
            exit=self._finish_exit,
            gpus=self._gpus,
        )
        delta = row_delta(held, before, after, event, effects, now_ms())
        self.seq, self.row, self.final_metrics = delta.seq, delta.row, delta.final_metrics
        if "report_n" in delta.columns:
            self.report_n = 0
        return delta

    def _transitioned(self, before: JobState, after: JobState) -> JobTransitioned:
        """The event its followers hear (``runplane/jobs/transitions.py``): the row as the
        actor holds it now, the metrics stored, the artifacts an ending keeps."""
        artifacts: list[dict[str, Any]] = []
        if after.phase.terminal and not before.phase.terminal:
            finish = self._finish_artifacts
            artifacts = list(self.row.artifacts if finish is None else finish)
        return JobTransitioned(self.row, before, after, dict(self.final_metrics), artifacts)

    def _log_refused(self, before: JobState, exc: Exception) -> None:
        # after a cancel, the attempt's late reports (phase, node loss) are routine
        routine = before.phase is Phase.CANCELLED
        log.log(
            logging.DEBUG if routine else logging.WARNING,
            "late report after a cancel ignored" if routine else "transition refused",
            extra={"job_id": self.id, "reason": str(exc)},
        )

    async def _teleop(self, stream: str, frame: str) -> TeleopOrder:
        node_id, attempt = self.state.node_id, self.state.attempt
        if self.state.phase is not Phase.RUNNING or node_id is None:
            return TeleopOrder(not_live=f"the job is {self.state.phase.value}, not running")
        seq = await self.streams.next_teleop_seq(stream)
        key: AckKey = (self.id, attempt, stream, seq)
        acks = self.deps.streams.teleop_acks
        pending = acks.expect(key)
        order = p.Teleop(
            job_id=self.id, attempt=attempt, stream=stream, seq=seq, ts=now_ms(), frame=frame
        )
        sent = await self.deps.node.deliver(node_id, order)
        if not sent:
            acks.forget(key)
        return TeleopOrder(sent=sent, seq=seq, key=key, pending=pending)

    def _publish(self, events: list[StoredEvent], *, terminal: bool = False) -> None:
        """Put stored ``events`` on the ring; with ``terminal`` the last one (the terminal
        phase event) ends the stream."""
        if self.ring.closed:  # after the terminal phase: stored only (the stream has ended)
            return
        for i, event in enumerate(events):
            end = terminal and i == len(events) - 1 and event.kind == "phase"
            self.ring.publish(JobEvent.of(event, end=end))

    async def _effects(
        self, before: JobState, after: JobState, effects: tuple[Effect, ...]
    ) -> None:
        for effect in effects:
            match effect:
                case Effect.RUN_ON_NODE if after.ranks:
                    await self._run_on_ranks(after)
                case Effect.RUN_ON_NODE:
                    assert after.node_id is not None
                    await self._run_on_node(after.node_id, after.attempt)
                case Effect.RELEASE:
                    await self.deps.placement.release(self.id)
                case Effect.DEQUEUE:
                    await self.deps.placement.dequeue(self.id)
                case Effect.ENQUEUE:
                    await self.deps.placement.enqueue(replace(self.row, phase=after.phase))
                case Effect.COUNT_LOST:
                    if before.node_id:
                        await self.deps.placement.node_outcome(before.node_id, AttemptOutcome.LOST)
                case Effect.RETRY_LATER:
                    self._await_backoff()
                case Effect.CANCEL_ON_NODE:
                    pass  # delivered by _cancel, which knows whether it reached the node
                case Effect.CANCEL_RANKS:
                    await stop_ranks(self.deps.node, self.id, before, after)
        if after.phase.terminal and before.node_id and after.phase is Phase.SUCCEEDED:
            await self.deps.placement.node_outcome(before.node_id, AttemptOutcome.OK)

    async def _run_on_node(self, node_id: str, attempt: int) -> None:
        """Send the attempt's run order; one the node did not take sends the job back
        (uncounted: the loss is the node's)."""
        order = await self.deps.node.run_order(self.row, attempt)
        delivered = await self.deps.node.deliver(node_id, order)
        await self.deps.placement.node_outcome(node_id, AttemptOutcome.PLACED)
        if not delivered:  # the node vanished between plan and order
            reason = f"node {node_id} went away before the run order"
            self.context.start_soon(self._undelivered, attempt, reason)

    async def _run_on_ranks(self, state: JobState) -> None:
        """A gang: one run order per rank (``runplane/actors/job_gang.py``); a rank's
        order not taken sends the whole gang back (its other ranks told to stop)."""
        base = await self.deps.node.run_order(self.row, state.attempt)
        missed = await run_ranks(self.deps.node, base, state)
        for node_id in {r.node_id for r in state.ranks}:
            await self.deps.placement.node_outcome(node_id, AttemptOutcome.PLACED)
        if missed is not None:
            reason = f"node {missed} went away before the run order"
            self.context.start_soon(self._undelivered, state.attempt, reason)

    async def _undelivered(self, attempt: int, reason: str) -> None:
        await self.context.ref.tell(OrderUndelivered(attempt, reason))

    def _system_line(self, events: list[StoredEvent], line: str) -> None:
        self.seq += 1
        events.append(system_line_event(self.id, self.seq, line, now_ms()))

    def _stored(self, n: int | None) -> bool:
        """True for a numbered report already taken: the agent resent it after a lost
        connection (the server before may have stored it or not: docs/agent.md)."""
        if n is None:
            return False
        if n <= self.report_n:
            log.debug("resent report already stored", extra={"job_id": self.id, "n": n})
            return True
        return False

    def _numbered(self, n: int | None) -> dict[str, Any]:
        """The ``report_n`` column to store with a report's write (none when unnumbered)."""
        if n is None:
            return {}
        self.report_n = n
        return {"report_n": n}

    async def _logs(
        self, lines: Sequence[tuple[str, ...]], n: int | None = None, rank: int | None = None
    ) -> None:
        room = max(0, LOG_CAP - self.log_lines)
        kept, dropped = lines[:room], len(lines) - min(room, len(lines))
        events: list[StoredEvent] = []
        ts = now_ms()
        for entry in kept:
            self.seq += 1
            service = entry[2] if len(entry) > 2 else None
            events.append(log_event(self.id, self.seq, entry[0], entry[1], ts, service, rank))
        first_drop = dropped and not self.log_dropped
        self.log_lines += len(kept)
        self.log_dropped += dropped
        numbered = self._numbered(n)
        if first_drop:
            self._system_line(
                events,
                f"log cap of {LOG_CAP} lines reached: further lines are counted but not kept",
            )
        if not events:
            return
        await self.deps.store.transaction(
            repo.save_state(
                self.id,
                self.state,
                events,
                self.seq,
                log_lines=self.log_lines,
                log_dropped=self.log_dropped,
                **numbered,
            )
        )
        self._publish(events)

    async def _wait_reason(self, reason: str) -> bool:
        """Store and publish a queued job's new wait reason; False (nothing written) when
        the job is not queued or already has this reason."""
        if self.state.phase is not Phase.QUEUED or reason == self.wait_reason:
            return False
        self.seq += 1
        event = wait_reason_event(self.id, self.seq, reason, now_ms())
        await self.deps.store.transaction(
            repo.save_state(self.id, self.state, [event], self.seq, wait_reason=reason)
        )
        self.wait_reason = reason
        self._publish([event])
        return True

    async def _metric(
        self, step: int | None, values: dict[str, float], n: int | None, rank: int | None = None
    ) -> None:
        self.seq += 1
        self.final_metrics.update(values)
        event = metric_event(self.id, self.seq, step, values, now_ms(), rank)
        await self.deps.store.transaction(
            repo.save_state(
                self.id,
                self.state,
                [event],
                self.seq,
                final_metrics=to_json(self.final_metrics),
                **self._numbered(n),
            )
        )
        self._publish([event])
