"""Where each message of a node agent's session goes: its node actor or its job's actor
(``agent_session.py`` reads and checks the frames; this tells the actors)."""

from __future__ import annotations

import logging

import trio

from runplane.actors.job_messages import (
    JOBS,
    AgentFinished,
    AgentLogs,
    AgentMetric,
    AgentPhase,
    AgentStream,
    JobMsg,
    LoseAttempt,
    OrderUndelivered,
)
from runplane.actors.node import AttemptEnded, Beat, Drain, NodeMsg, Released, UpdateReported
from runplane.agent import protocol as p
from runplane.runtime import ActorGone, ActorRef, MailboxClosed, Registry
from runplane.system import Root

log = logging.getLogger("runplane.nodes")

#: Seconds a hand-back (``job_released``) may take to be recorded, shielded from the
#: session's end.
RELEASE_SEC = 10.0


async def dispatch(
    root: Root,
    node_id: str,
    node: ActorRef[NodeMsg],
    outbox: trio.MemorySendChannel[str],
    msg: p.AgentMsg,
) -> None:
    registry = root.registry
    match msg:
        case p.Heartbeat(running=running, images=images):
            # no scheduling point of its own: the next receive is one (2,000 agents beat
            # 400 times a second; docs/benchmarks.md "agents"); ``images`` only when the
            # node's image cache changed
            await node.tell_now(Beat(tuple((r.job_id, r.attempt) for r in running), images))
        case p.JobPhase() as report:
            await _to_job(registry, report.job_id, AgentPhase(node_id, report))
        case p.JobLogs() as report:
            await _to_job(registry, report.job_id, AgentLogs(node_id, report))
        case p.JobMetric() as report:
            await _to_job(registry, report.job_id, AgentMetric(node_id, report))
        case p.JobFinished() as done:
            finished = AgentFinished(node_id, done)
            if not await _to_job(registry, done.job_id, finished, wait=True):
                return  # not recorded: no ack, the agent resends it
            await node.tell(AttemptEnded(done.job_id, done.attempt))
            # acknowledged once recorded (or refused as stale: either way, stop resending)
            outbox.send_nowait(p.encode(p.FinishedAck(job_id=done.job_id, attempt=done.attempt)))
        case p.Draining(deadline_sec=deadline_sec):
            await node.tell(Drain(outbox, deadline_sec))
        case p.JobReleased(job_id=job_id, attempt=attempt, declined=declined):
            await _released(registry, node, job_id, attempt, declined)
        case p.JobStream() as report:
            await _to_job(registry, report.job_id, AgentStream(node_id, report))
        case p.TeleopAck() as ack:
            key = (ack.job_id, ack.attempt, ack.stream, ack.seq)
            if not root.teleop_acks.resolve(key, ack.ok, ack.error):
                log.info("late teleop ack ignored", extra={"job_id": ack.job_id, "seq": ack.seq})
        case p.UpdateStatus(version=version, phase=phase, error=error):
            await node.tell(UpdateReported(version, phase, error))
        case p.Hello():
            pass  # a second hello is meaningless; ignore it


async def _released(
    registry: Registry, node: ActorRef[NodeMsg], job_id: str, attempt: int, declined: str | None
) -> None:
    """The requeue is stored before the next frame is read, shielded: the draining agent
    closes its session right after, which cancels the session, and a server stopping
    then must still have recorded every hand-back."""
    with trio.CancelScope(shield=True, deadline=trio.current_time() + RELEASE_SEC):
        reason = await node.ask(Released(job_id, attempt), timeout=None)
        if reason is not None and declined:  # nothing ran: not the node's loss
            back = OrderUndelivered(attempt, f"node declined it: {declined}", False)
            await _to_job(registry, job_id, back, wait=True)
        elif reason is not None:
            await _to_job(registry, job_id, LoseAttempt(attempt, reason), wait=True)


async def _to_job(registry: Registry, job_id: str, msg: JobMsg, *, wait: bool = False) -> bool:
    """Forward to the job's actor; False when it could not take the message (stopping or
    crashed), so a finish is not acknowledged and the agent sends it again. Unknown jobs
    (an agent reporting a job this server never had) are ignored: the agent gets a cancel
    from the node actor at its next hello."""
    try:
        if wait:
            # no timeout: a finish must be recorded; a busy job actor only slows this session
            await registry.ask(JOBS, job_id, msg, timeout=None)
        else:
            await registry.tell(JOBS, job_id, msg)
    except LookupError:
        log.warning("report for unknown job ignored", extra={"job_id": job_id})
    except (ActorGone, MailboxClosed):
        log.warning("report for a stopping job dropped", extra={"job_id": job_id})
        return False
    return True
