"""``/v1/nodes/connect``: the node agents' WebSocket (protocol: ``runplane/agent/protocol.py``).

The handler is transport only: it identifies the agent (credential, join token, or open
enrollment), hands the session's outbox to the node actor, forwards each frame to the
actor it concerns, and writes what the actors send back. Every frame is checked first
(``wire_checks.py``: sizes, nesting, names, numbers): a hello the checks refuse is answered
``refused`` naming the field and closed with 4400; a later message they refuse is dropped
(logged once per field) and a refused ``job_finished`` ends its attempt failed. A frame
that is not a message of the protocol closes the session with 4400 and a reason; an
unknown credential 4401; an old protocol 4426. A frame of a type this server does not
know (a newer agent's) is logged and ignored.
"""

from __future__ import annotations

import contextlib
import logging

import trio
from pydantic import ValidationError
from quart import Blueprint, current_app, websocket

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
from runplane.auth.rules import OWN_CREDENTIAL
from runplane.http.context import services
from runplane.http.openapi import doc
from runplane.http.ratelimit import CLOSE_RATE_LIMITED, limiter_of, retry_after
from runplane.http.wire_checks import (
    Dropped,
    Unknown,
    WireRefused,
    check_frame,
    failed_finish,
    one_line,
)
from runplane.nodes.connect import ConnectRefused
from runplane.nodes.enrollment import NodeIdentity
from runplane.runtime import ActorGone, ActorRef, MailboxClosed, Registry
from runplane.services.fleet import Fleet

blueprint = Blueprint("agents", __name__)
log = logging.getLogger("runplane.nodes")

HELLO_TIMEOUT = 10.0
OUTBOX_CAPACITY = 1024
#: Seconds a hand-back (``job_released``) may take to be recorded, shielded from the
#: session's end.
RELEASE_SEC = 10.0


#: Bytes a close reason may take (a control frame holds 125, two of them for the code).
CLOSE_REASON_MAX = 120


def short_reason(reason: str, limit: int = CLOSE_REASON_MAX) -> str:
    """``reason`` fit for a close frame: whole if it fits, else cut at a word boundary
    with "..." (UTF-8 bytes counted)."""
    if len(reason.encode()) <= limit:
        return reason
    cut = reason.encode()[: limit - 3].decode(errors="ignore")
    head = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return head.rstrip(" ,;:(") + "..."


async def _close(code: int, reason: str) -> None:
    await websocket.close(code, short_reason(reason))


async def _refuse(code: int, reason: str) -> None:
    """Send the whole sentence first (the agent prints it), then close with a short one."""
    with contextlib.suppress(Exception):  # the agent may be gone already
        await websocket.send(p.encode(p.Refused(code=code, reason=reason)))
    await _close(code, reason)


@blueprint.websocket("/v1/nodes/connect")
@doc(
    "The node agents' WebSocket",
    # it authenticates in its handler (node credential, join token or open enrollment;
    # runplane/actors/fleet.py), so the HTTP layer lets it through
    rule=OWN_CREDENTIAL,
)
async def connect() -> None:
    svc = services()
    fleet = svc.root.fleet
    await websocket.accept()
    found = await _hello(fleet)
    if found is None:
        return
    hello, identity, credential = found
    node_id = identity.node_id
    send, receive = trio.open_memory_channel[str](OUTBOX_CAPACITY)
    # where it connected from: a gang's master address when it names none of its own
    client = websocket.scope.get("client")
    node = await fleet.attach(identity, hello, send, client[0] if client else None)
    await websocket.send(
        p.encode(
            p.Welcome(node_id=node_id, credential=credential, heartbeat_sec=svc.root.heartbeat_sec)
        )
    )
    # where each attempt it still runs resumes: it resends its reports after these
    held = [(r.job_id, r.attempt) for r in hello.running]
    stored = await svc.root.records.report_marks(held)
    marks = [p.ReportMark(job_id=j, attempt=a, n=n) for (j, a), n in stored.items()]
    await websocket.send(p.encode(p.Resume(marks=marks)))
    log.info("agent connected", extra={"node_id": node_id, "agent_version": hello.agent_version})
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_write, node_id, receive, nursery.cancel_scope)
            await _read(node_id, node, send)
            nursery.cancel_scope.cancel()  # _read closed the session: nothing more is sent
    finally:
        with trio.CancelScope(shield=True):
            await fleet.detach(node, node_id, send)
        log.info("agent disconnected", extra={"node_id": node_id})


async def _hello(fleet: Fleet) -> tuple[p.Hello, NodeIdentity, str | None] | None:
    """The agent's hello and who it is; None when the session was closed instead (no
    hello in time, a malformed one, a refused credential)."""
    with trio.move_on_after(HELLO_TIMEOUT) as waited:
        first = await websocket.receive() or ""  # an empty binary frame reads as None
    if waited.cancelled_caught:
        await _close(p.CLOSE_PROTOCOL_ERROR, "no hello within 10 s")
        return None
    try:
        hello = check_frame(first)
        if not isinstance(hello, p.Hello):
            raise ValueError("the first message must be hello")
        if await _enrollment_limited(hello):
            return None
        identity, credential = await fleet.identify(hello)
    except WireRefused as exc:
        # the agent would say the same hello again: it prints this and stops
        log.warning("agent hello refused", extra={"field": exc.field, "reason": exc.why[:200]})
        await _refuse(p.CLOSE_PROTOCOL_ERROR, f"bad hello: {exc}")
        return None
    except ValidationError as exc:
        await _close(p.CLOSE_PROTOCOL_ERROR, f"bad hello: {one_line(exc)}")
        return None
    except ValueError as exc:
        await _close(p.CLOSE_PROTOCOL_ERROR, f"bad hello: {exc}".splitlines()[0])
        return None
    except ConnectRefused as exc:
        log.warning("agent refused", extra={"code": exc.code, "reason": exc.reason})
        await _refuse(exc.code, exc.reason)
        return None
    return hello, identity, credential


async def _enrollment_limited(hello: p.Hello) -> bool:
    """An enrollment (a hello without a node credential) over its address's rate limit
    (``RUNPLANE_RATE_LIMIT_ADDRESS``) is closed with 4429, which the agent retries after
    its backoff; True when it was. A node's reconnects with its credential are not
    counted."""
    limiter = limiter_of(current_app.extensions)
    if limiter is None or hello.credential:
        return False
    wait = limiter.enrollment(websocket.remote_addr)
    if wait <= 0.0:
        return False
    reason = f"too many node enrollments from this address; retry after {retry_after(wait)} s"
    log.warning("agent enrollment rate limited", extra={"remote": websocket.remote_addr})
    await _close(CLOSE_RATE_LIMITED, reason)
    return True


async def _write(
    node_id: str, receive: trio.MemoryReceiveChannel[str], session: trio.CancelScope
) -> None:
    """Send what the actors put in the outbox; end the session when the node actor
    closes it (this session is stale, or the node is lost)."""
    leading = current_app.extensions.get("runplane.ha.leading")
    async with receive:
        async for text in receive:
            if leading is not None and not leading():
                # HA: this replica's lease may have ended (it was paused past it): nothing
                # more goes to the agent, which reconnects to the new leader
                # (docs/operations.md "High availability")
                log.warning("not sent: the lease may have ended", extra={"node_id": node_id})
                break
            await websocket.send(text)
    session.cancel()


async def _read(node_id: str, node: ActorRef[NodeMsg], send: trio.MemorySendChannel[str]) -> None:
    """Forward each frame to the actor it concerns until the agent goes, or sends a
    malformed frame (closed with 4400: returns)."""
    dropped = Dropped(node_id)
    try:
        while True:
            raw = await websocket.receive() or ""  # (as above)
            try:
                msg = check_frame(raw)
            except WireRefused as exc:
                dropped.note(exc)
                finish = failed_finish(exc)
                if finish is not None:  # acknowledged, so the agent stops resending it
                    await _dispatch(node_id, node, send, finish)
                continue
            except ValidationError as exc:
                await _close(p.CLOSE_PROTOCOL_ERROR, f"bad message: {one_line(exc)}")
                return
            if isinstance(msg, Unknown):
                log.warning(
                    "agent message of an unknown type ignored",
                    extra={"node_id": node_id, "type": msg.kind},
                )
                continue
            await _dispatch(node_id, node, send, msg)
    finally:
        if dropped.count:
            log.warning(
                "agent messages dropped", extra={"node_id": node_id, "count": dropped.count}
            )


async def _dispatch(
    node_id: str, node: ActorRef[NodeMsg], outbox: trio.MemorySendChannel[str], msg: p.AgentMsg
) -> None:
    registry = services().root.registry
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
            # The requeue is stored before the next frame is read, shielded: the draining
            # agent closes its session right after, which cancels this handler, and a server
            # stopping then must still have recorded every hand-back.
            with trio.CancelScope(shield=True, deadline=trio.current_time() + RELEASE_SEC):
                reason = await node.ask(Released(job_id, attempt), timeout=None)
                if reason is not None and declined:  # nothing ran: not the node's loss
                    back = OrderUndelivered(attempt, f"node declined it: {declined}", False)
                    await _to_job(registry, job_id, back, wait=True)
                elif reason is not None:
                    await _to_job(registry, job_id, LoseAttempt(attempt, reason), wait=True)
        case p.JobStream() as report:
            await _to_job(registry, report.job_id, AgentStream(node_id, report))
        case p.TeleopAck() as ack:
            key = (ack.job_id, ack.attempt, ack.stream, ack.seq)
            if not services().root.teleop_acks.resolve(key, ack.ok, ack.error):
                log.info("late teleop ack ignored", extra={"job_id": ack.job_id, "seq": ack.seq})
        case p.UpdateStatus(version=version, phase=phase, error=error):
            await node.tell(UpdateReported(version, phase, error))
        case p.Hello():
            pass  # a second hello is meaningless; ignore it


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
