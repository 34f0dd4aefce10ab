"""One node agent's session on ``/v1/nodes/connect``, whatever carries it (protocol:
``runplane/agent/protocol.py``).

The session is transport only: it identifies the agent (credential, join token, or open
enrollment), hands the session's outbox to the node actor, forwards each frame to the
actor it concerns, and writes what the actors send back. Every frame is checked first
(``wire_checks.py``: sizes, nesting, names, numbers): a hello the checks refuse is answered
``refused`` naming the field and closed with 4400; a later message they refuse is dropped
(logged once per field) and a refused ``job_finished`` ends its attempt failed. A frame
that is not a message of the protocol closes the session with 4400 and a reason; an
unknown credential 4401; an old protocol 4426. A frame of a type this server does not
know (a newer agent's) is logged and ignored.

Two transports carry it (:class:`Socket`): Quart's ``websocket`` (the declared route,
``routes/agents.py``, and all of it with ``RUNPLANE_LEAN_LANES=0``) and plain ASGI
messages on hypercorn's receive/send (the lean lane, ``lean/agents.py``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import trio
from pydantic import ValidationError

from runplane.actors.node import Beat, NodeMsg
from runplane.agent import protocol as p
from runplane.http.agent_dispatch import dispatch
from runplane.http.context import Services
from runplane.http.ratelimit import CLOSE_RATE_LIMITED, Limiter, limiter_of, retry_after
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
from runplane.runtime import ActorRef

log = logging.getLogger("runplane.nodes")

HELLO_TIMEOUT = 10.0
OUTBOX_CAPACITY = 1024
#: Bytes a close reason may take (a control frame holds 125, two of them for the code).
CLOSE_REASON_MAX = 120
#: An idle agent's heartbeat (no attempt running, no image change) as every agent encodes
#: it: nothing in it for the frame checks to refuse or clean, so it goes to the node
#: actor without them (they cost more than the rest of the beat's handling in ours;
#: docs/benchmarks.md, "lean lanes: the agents' WebSocket").
IDLE_BEAT = p.encode(p.Heartbeat())
_IDLE = Beat(())


class Socket(Protocol):
    """An accepted-or-not WebSocket, as the session uses it."""

    @property
    def scope(self) -> Mapping[str, Any]:
        """The ASGI scope (``client``: where the agent connected from)."""

    async def accept(self) -> None: ...

    async def receive(self) -> str | bytes | None:
        """The next frame (an empty one reads as ""); None when the agent has gone."""

    async def send(self, text: str) -> None: ...

    async def close(self, code: int, reason: str) -> None: ...


@dataclass(frozen=True, slots=True)
class Server:
    """What a session needs of the running app."""

    svc: Services
    limiter: Limiter | None
    #: HA: whether this replica's lease surely still runs (None: not HA)
    leading: Callable[[], bool] | None

    @classmethod
    def of(cls, extensions: Mapping[str, Any]) -> Server:
        """The app's services, read off its extensions (once its lifespan started)."""
        return cls(
            extensions["runplane"], limiter_of(extensions), extensions.get("runplane.ha.leading")
        )


def remote_addr(scope: Mapping[str, Any]) -> str:
    """Where the agent connected from, as Quart's ``websocket.remote_addr`` says it."""
    client = scope.get("client")
    return str(client[0]) if client else "<local>"


def short_reason(reason: str, limit: int = CLOSE_REASON_MAX) -> str:
    """``reason`` fit for a close frame: whole if it fits, else cut at a word boundary
    with "..." (UTF-8 bytes counted)."""
    if len(reason.encode()) <= limit:
        return reason
    cut = reason.encode()[: limit - 3].decode(errors="ignore")
    head = cut.rsplit(" ", 1)[0] if " " in cut else cut
    return head.rstrip(" ,;:(") + "..."


async def _close(sock: Socket, code: int, reason: str) -> None:
    await sock.close(code, short_reason(reason))


async def _refuse(sock: Socket, code: int, reason: str) -> None:
    """Send the whole sentence first (the agent prints it), then close with a short one."""
    with contextlib.suppress(Exception):  # the agent may be gone already
        await sock.send(p.encode(p.Refused(code=code, reason=reason)))
    await _close(sock, code, reason)


async def run_session(sock: Socket, server: Server) -> None:
    """Accept, identify the agent, attach its node, then relay frames until it goes."""
    root = server.svc.root
    fleet = root.fleet
    await sock.accept()
    found = await _hello(sock, server)
    if found is None:
        return
    hello, identity, credential = found
    node_id = identity.node_id
    send, receive = trio.open_memory_channel[str](OUTBOX_CAPACITY)
    # where it connected from: a gang's master address when it names none of its own
    client = sock.scope.get("client")
    node = await fleet.attach(identity, hello, send, client[0] if client else None)
    await sock.send(
        p.encode(
            p.Welcome(node_id=node_id, credential=credential, heartbeat_sec=root.heartbeat_sec)
        )
    )
    # where each attempt it still runs resumes: it resends its reports after these
    held = [(r.job_id, r.attempt) for r in hello.running]
    stored = await root.records.report_marks(held)
    marks = [p.ReportMark(job_id=j, attempt=a, n=n) for (j, a), n in stored.items()]
    await sock.send(p.encode(p.Resume(marks=marks)))
    log.info("agent connected", extra={"node_id": node_id, "agent_version": hello.agent_version})
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_write, sock, server, node_id, receive, nursery.cancel_scope)
            await _read(sock, server, node_id, node, send)
            nursery.cancel_scope.cancel()  # _read closed the session: nothing more is sent
    finally:
        with trio.CancelScope(shield=True):
            await fleet.detach(node, node_id, send)
        log.info("agent disconnected", extra={"node_id": node_id})


async def _hello(sock: Socket, server: Server) -> tuple[p.Hello, NodeIdentity, str | None] | None:
    """The agent's hello and who it is; None when the session was closed instead (no
    hello in time, a malformed one, a refused credential) or the agent went."""
    with trio.move_on_after(HELLO_TIMEOUT) as waited:
        first = await sock.receive()
    if waited.cancelled_caught:
        await _close(sock, p.CLOSE_PROTOCOL_ERROR, f"no hello within {HELLO_TIMEOUT:g} s")
        return None
    if first is None:
        return None
    try:
        hello = check_frame(first)
        if not isinstance(hello, p.Hello):
            raise ValueError("the first message must be hello")
        if await _enrollment_limited(sock, server, hello):
            return None
        identity, credential = await server.svc.root.fleet.identify(hello)
    except WireRefused as exc:
        # the agent would say the same hello again: it prints this and stops
        log.warning("agent hello refused", extra={"field": exc.field, "reason": exc.why[:200]})
        await _refuse(sock, p.CLOSE_PROTOCOL_ERROR, f"bad hello: {exc}")
        return None
    except ValidationError as exc:
        await _close(sock, p.CLOSE_PROTOCOL_ERROR, f"bad hello: {one_line(exc)}")
        return None
    except ValueError as exc:
        await _close(sock, p.CLOSE_PROTOCOL_ERROR, f"bad hello: {exc}".splitlines()[0])
        return None
    except ConnectRefused as exc:
        log.warning("agent refused", extra={"code": exc.code, "reason": exc.reason})
        await _refuse(sock, exc.code, exc.reason)
        return None
    return hello, identity, credential


async def _enrollment_limited(sock: Socket, server: Server, hello: p.Hello) -> bool:
    """An enrollment (a hello without a node credential) over its address's rate limit
    (``RUNPLANE_RATE_LIMIT_ADDRESS``) is closed with 4429, which the agent retries after
    its backoff; True when it was. A node's reconnects with its credential are not
    counted."""
    if server.limiter is None or hello.credential:
        return False
    remote = remote_addr(sock.scope)
    wait = server.limiter.enrollment(remote)
    if wait <= 0.0:
        return False
    reason = f"too many node enrollments from this address; retry after {retry_after(wait)} s"
    log.warning("agent enrollment rate limited", extra={"remote": remote})
    await _close(sock, CLOSE_RATE_LIMITED, reason)
    return True


async def _write(
    sock: Socket,
    server: Server,
    node_id: str,
    receive: trio.MemoryReceiveChannel[str],
    session: trio.CancelScope,
) -> None:
    """Send what the actors put in the outbox; end the session when the node actor
    closes it (this session is stale, or the node is lost)."""
    leading = server.leading
    async with receive:
        async for text in receive:
            if leading is not None and not leading():
                # HA: this replica's lease may have ended (it was paused past it): nothing
                # more goes to the agent, which reconnects to the new leader
                # (docs/operations.md "High availability")
                log.warning("not sent: the lease may have ended", extra={"node_id": node_id})
                break
            await sock.send(text)
    session.cancel()


async def _read(
    sock: Socket,
    server: Server,
    node_id: str,
    node: ActorRef[NodeMsg],
    send: trio.MemorySendChannel[str],
) -> None:
    """Forward each frame to the actor it concerns until the agent goes, or sends a
    malformed frame (closed with 4400: returns)."""
    dropped = Dropped(node_id)
    root = server.svc.root
    try:
        while True:
            raw = await sock.receive()
            if raw == IDLE_BEAT:
                # what dispatch() does with it, without a scheduling point of its own
                await node.tell_now(_IDLE)
                continue
            if raw is None:
                return  # the agent went
            try:
                msg = check_frame(raw)
            except WireRefused as exc:
                dropped.note(exc)
                finish = failed_finish(exc)
                if finish is not None:  # acknowledged, so the agent stops resending it
                    await dispatch(root, node_id, node, send, finish)
                continue
            except ValidationError as exc:
                await _close(sock, p.CLOSE_PROTOCOL_ERROR, f"bad message: {one_line(exc)}")
                return
            if isinstance(msg, Unknown):
                log.warning(
                    "agent message of an unknown type ignored",
                    extra={"node_id": node_id, "type": msg.kind},
                )
                continue
            await dispatch(root, node_id, node, send, msg)
    finally:
        if dropped.count:
            log.warning(
                "agent messages dropped", extra={"node_id": node_id, "count": dropped.count}
            )
