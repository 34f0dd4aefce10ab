"""The agent's session: one WebSocket to the server at a time (``/v1/nodes/connect``),
said ``hello`` on (credential or join token, facts, the attempts it holds), answered
``welcome`` then ``resume``; while it is up, reports go out in order, heartbeats and pings
keep it honest and the server's orders go to the job runner and the lifecycle. It may
drop at any time: jobs keep running, their reports wait in the outbox, and the session
connects again with exponential backoff, to the next server of ``--server URL,URL``
(failover between HA replicas). See ``docs/agent.md``.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio
import trio_websocket
from pydantic import ValidationError

from runplane import __version__
from runplane.agent import credentials
from runplane.agent.backoff import Backoff
from runplane.agent.core import Connection, Core
from runplane.agent.errors import AgentRefused, AgentReplaced
from runplane.agent.freeze import TICK_SEC
from runplane.agent.jobref import job_key
from runplane.agent.lifecycle import Lifecycle
from runplane.agent.protocol import (
    CLOSE_DISABLED,
    CLOSE_REPLACED,
    CLOSE_UNAUTHORIZED,
    CLOSE_UPGRADE_REQUIRED,
    PROTOCOL_VERSION,
    Cancel,
    FinishedAck,
    Hello,
    Refused,
    Resume,
    Run,
    Teleop,
    Update,
    Welcome,
    decode_server,
    encode,
)
from runplane.agent.runner import JobRunner
from runplane.agent.urls import connect_url

log = logging.getLogger("runplane.agent")

CONNECT_TIMEOUT_SEC = 10.0
WELCOME_TIMEOUT_SEC = 10.0
DISCONNECT_TIMEOUT_SEC = 2.0
#: A connection whose server does not answer a WebSocket ping within max(this, 3 heartbeats)
#: is given up (a half-open TCP connection would otherwise look alive for many minutes).
PING_TIMEOUT_MIN_SEC = 10.0
#: A ``job_finished`` not acknowledged this long after it was sent is sent again.
ACK_RESEND_SEC = 30.0
#: After the welcome, how long reports wait for the server's ``resume`` (sent right after
#: it) before going out unnumbered: a server older than ``resume`` never sends it.
RESUME_WAIT_SEC = 1.0
#: After the jobs of a stopping agent ended, how long it waits for their finish to be acked.
STOP_FLUSH_SEC = 5.0
#: Largest frame accepted from the server (a ``run`` may carry inline files).
MAX_INCOMING_MESSAGE = 64 * 1024 * 1024


class _ProtocolViolation(Exception):
    pass


class Frozen(Exception):
    """This agent did not run for longer than its server waits for a heartbeat (about 2 of
    its 3 missed beats): the server may have taken the node for lost and given its jobs to
    others, so the orders still buffered on this connection are stale. The session drops
    the connection without acting on them and says hello again; an order it dropped is
    not in that hello's ``running``, so the server requeues its attempt (docs/agent.md
    "A frozen agent")."""


RETRYABLE = (
    Frozen,
    trio_websocket.HandshakeError,
    trio_websocket.ConnectionClosed,
    OSError,
    trio.BrokenResourceError,
    trio.ClosedResourceError,
    trio.TooSlowError,
    _ProtocolViolation,
)


class AgentSession:
    """The connection side of one agent (see the module doc)."""

    def __init__(
        self,
        core: Core,
        runner: JobRunner,
        lifecycle: Lifecycle,
        *,
        servers: list[str],
        data_dir: Path,
        join_token: str | None,
        auto_update: bool,
        backoff: Backoff,
    ) -> None:
        self.core = core
        self.runner = runner
        self.lifecycle = lifecycle
        #: the servers to try, in turn (``--server URL[,URL...]``)
        self.servers = servers
        self._server = 0
        self.data_dir = data_dir
        self.join_token = join_token
        self.auto_update = auto_update
        self._backoff = backoff
        self.credential: str | None = None
        self.current: Connection | None = None
        self.welcomed = trio.Event()
        self.welcomes = 0
        self.connect_attempts = 0
        self.last_error: str | None = None
        #: a connect attempt in progress (a stop cancels it rather than waiting)
        self.handshake_scope: trio.CancelScope | None = None

    @property
    def server_url(self) -> str:
        return self.servers[self._server]

    @property
    def url(self) -> str:
        return connect_url(self.server_url)

    # -- connecting

    async def connect_loop(self) -> None:
        backoff = self._backoff
        while not self.core.stop.is_set():
            self.connect_attempts += 1
            log.info("connecting", extra={"url": self.url, "attempt": backoff.attempts + 1})
            welcomes = self.welcomes
            try:
                with trio.CancelScope() as self.handshake_scope:
                    await self._connect(backoff)
            except RETRYABLE as exc:
                self.last_error = _describe(exc)
                if self.welcomes > welcomes:
                    log.warning("connection lost", extra={"error": self.last_error})
                else:
                    log.warning("cannot connect", extra={"error": self.last_error})
            if self.core.stop.is_set():
                break
            self._server = (self._server + 1) % len(self.servers)
            delay = backoff.next_delay()
            log.info(
                "reconnecting",
                extra={"delay_sec": round(delay, 3), "retry": backoff.attempts, "url": self.url},
            )
            with trio.move_on_after(delay):
                await self.core.stop.wait()
        # Stopping while disconnected: the jobs were cancelled; their finish stays on disk
        # and is sent by the next agent run.
        self.core.cancel_jobs()
        await self.core.wait_until(lambda: not self.core.jobs)

    async def _connect(self, backoff: Backoff) -> None:
        try:
            async with trio_websocket.open_websocket_url(
                self.url,
                connect_timeout=CONNECT_TIMEOUT_SEC,
                disconnect_timeout=DISCONNECT_TIMEOUT_SEC,
                max_message_size=MAX_INCOMING_MESSAGE,
            ) as ws:
                await ws.send_message(encode(self._hello()))
                with trio.fail_after(WELCOME_TIMEOUT_SEC):
                    raw = await ws.get_message()
                refused = self._refused_by(raw)
                if refused is not None:
                    log.error(
                        "refused by server",
                        extra={"code": refused.code, "reason": refused.reason},
                    )
                    raise refused
                welcome = self._parse_welcome(raw)
                self._on_welcome(welcome)
                backoff.reset()
                await self._serve(ws, welcome)
        except trio_websocket.ConnectionRejected as exc:
            if exc.status_code in (401, 403, 426):
                reason = _rejection_reason(exc)
                log.error("refused by server", extra={"status": exc.status_code, "reason": reason})
                raise AgentRefused(None, reason) from None
            raise
        except trio_websocket.ConnectionClosed as exc:
            refusal = self._refusal(exc.reason)
            if refusal is None:
                raise
            log.error("refused by server", extra={"code": refusal.code, "reason": refusal.reason})
            raise refusal from None

    def _hello(self) -> Hello:
        return Hello(
            protocol=PROTOCOL_VERSION,
            agent_version=__version__,
            credential=self.credential,
            join_token=None if self.credential else self.join_token,
            facts=self.core.hello_facts(),
            running=self.core.held(),
            channel="stable",
            auto_update=self.auto_update,
        )

    def _parse_welcome(self, raw: str | bytes) -> Welcome:
        try:
            msg = decode_server(raw)
        except ValidationError as exc:
            raise _ProtocolViolation(f"bad first message from the server: {exc}") from None
        if not isinstance(msg, Welcome):
            raise _ProtocolViolation(f"expected welcome, got {msg.type}")
        return msg

    def _on_welcome(self, welcome: Welcome) -> None:
        if welcome.protocol != PROTOCOL_VERSION:
            log.warning(
                "server speaks another protocol version",
                extra={"server": welcome.protocol, "agent": PROTOCOL_VERSION},
            )
        if welcome.credential and welcome.credential != self.credential:
            credentials.save_credential(self.data_dir, welcome.credential)
            enrolled = self.credential is None
            self.credential = welcome.credential
            log.info(
                "enrolled" if enrolled else "credential renewed",
                extra={
                    "node_id": welcome.node_id,
                    "credential_file": str(self.data_dir / credentials.CREDENTIAL_FILE),
                },
            )
        if welcome.node_id != self.core.node_id:
            credentials.save_node_id(self.data_dir, welcome.node_id)
        self.core.node_id = welcome.node_id
        self.handshake_scope = None  # from now on a stop is graceful, not a cancel
        self.welcomes += 1
        self.welcomed.set()
        log.info(
            "connected",
            extra={
                "node_id": welcome.node_id,
                "heartbeat_sec": welcome.heartbeat_sec,
                "holding": [list(k) for k in self.core.held_keys()],
            },
        )

    def _refused_by(self, raw: str | bytes) -> AgentRefused | None:
        """The refusal a server's ``refused`` message (its whole sentence) stands for."""
        try:
            msg = decode_server(raw)
        except ValidationError:
            return None  # _parse_welcome says what is wrong with it
        if not isinstance(msg, Refused):
            return None
        return self._refusal_of(msg.code, msg.reason.strip()) or AgentRefused(msg.code, msg.reason)

    def _refusal(self, reason: trio_websocket.CloseReason | None) -> AgentRefused | None:
        if reason is None:
            return None
        return self._refusal_of(reason.code, (reason.reason or "").strip())

    def _refusal_of(self, code: int, text: str) -> AgentRefused | None:
        if code == CLOSE_REPLACED:
            return AgentReplaced(
                code, text or "another agent connected as this node; this one stopped"
            )
        if code == CLOSE_UNAUTHORIZED:
            text = text or "the server refused this agent's credentials"
            if self.credential is not None:
                path = self.data_dir / credentials.CREDENTIAL_FILE
                text += (
                    f" (node credential from {path}; remove that file and enroll again "
                    "with --join-token)"
                )
            return AgentRefused(code, text)
        if code == CLOSE_UPGRADE_REQUIRED:
            return AgentRefused(
                code,
                text
                or f"the server does not support agent protocol {PROTOCOL_VERSION} "
                f"(runplane {__version__}): upgrade the agent",
            )
        if code == CLOSE_DISABLED:
            return AgentRefused(code, text or "the server does not accept node agents")
        return None

    # -- one connection

    async def _serve(self, ws: trio_websocket.WebSocketConnection, welcome: Welcome) -> None:
        session = Connection(ws, max(0.05, min(welcome.heartbeat_sec, 300.0)))
        self.core.freeze.set_heartbeat(session.heartbeat_sec)
        session.generation = self.core.freeze.look()
        self.current = session
        self.core.connected = True
        self.core.outbox.numbering = False  # until this server says resume
        self.core.outbox.requeue_unacked()
        if self.lifecycle.update_report is not None:  # the last word on a self-update, said again
            self.core.outbox.put_control(self.lifecycle.update_report)
        self.core.notify()
        try:
            async with trio.open_nursery() as nursery:

                async def guard(fn: Callable[[Connection], Any]) -> None:
                    try:
                        await fn(session)
                    except RETRYABLE as exc:
                        if session.failure is None and not session.closing:
                            session.failure = exc
                        nursery.cancel_scope.cancel()

                for fn in (
                    self._freeze_loop,
                    self._receive_loop,
                    self._send_loop,
                    self._heartbeat_loop,
                    self._ping_loop,
                    self._resend_loop,
                    self.lifecycle.drain_notice,
                ):
                    nursery.start_soon(guard, fn)

                async def stop_watch() -> None:
                    await self.core.stop.wait()
                    await self._stop_session(session)
                    nursery.cancel_scope.cancel()

                nursery.start_soon(stop_watch)
        finally:
            self.current = None
            self.core.connected = False
            self.core.outbox.clear_control()  # answers to this session: not for the next
            self.core.notify()
        if session.failure is not None:
            self.lifecycle.check_drain_refused(session)
            raise session.failure

    async def _stop_session(self, session: Connection) -> None:
        running = len(self.core.jobs)
        log.info("stopping", extra={"cancelling_jobs": running})
        self.core.cancel_jobs()
        await self.core.wait_until(lambda: not self.core.jobs)
        with trio.move_on_after(STOP_FLUSH_SEC):
            await self.core.wait_until(
                lambda: (
                    (self.core.outbox.empty() and not self.core.outbox.unacked())
                    or session.failure is not None
                )
            )
        session.closing = True
        with trio.CancelScope(shield=True), trio.move_on_after(DISCONNECT_TIMEOUT_SEC):
            await session.ws.aclose(1000, "agent stopping")

    async def _receive_loop(self, session: Connection) -> None:
        while True:
            raw = await session.ws.get_message()
            try:
                msg = decode_server(raw)
            except ValidationError as exc:
                log.warning("ignored a server message", extra={"error": str(exc)[:500]})
                continue
            if isinstance(msg, Run):
                self._check_not_frozen(session)
                self.runner.on_run(msg)
            elif isinstance(msg, Cancel):
                self.runner.on_cancel(msg)
            elif isinstance(msg, FinishedAck):
                self._on_ack(msg)
            elif isinstance(msg, Teleop):
                self.runner.on_teleop(msg)
            elif isinstance(msg, Update):
                self.lifecycle.on_update(msg)
            elif isinstance(msg, Resume):
                self._on_resume(msg, session)
            else:
                log.warning("ignored a second welcome")

    async def _send_loop(self, session: Connection) -> None:
        # a server that resends nothing (it predates ``resume``) is not waited for longer
        with trio.move_on_after(RESUME_WAIT_SEC):
            await session.resumed.wait()
        while True:
            head = self.core.outbox.head()
            if head is None:
                await self.core.changed.wait()
                continue
            _, messages = head
            for msg in messages:
                await session.ws.send_message(encode(msg))
            self.core.outbox.sent(trio.current_time())
            self.core.notify()

    def _check_not_frozen(self, session: Connection) -> None:
        """Raise :class:`Frozen` when the agent was frozen since this connection began:
        whatever it reads on it now may be stale (``freeze.py``)."""
        if self.core.freeze.since(session.generation):
            log.warning("dropping the connection and the orders it held: the agent was frozen")
            raise Frozen(f"the agent did not run for over {self.core.freeze.limit:g} s")

    async def _freeze_loop(self, session: Connection) -> None:
        """End the session (:class:`Frozen`) as soon as a freeze is seen."""
        while True:
            self._check_not_frozen(session)
            await trio.sleep(TICK_SEC)

    async def _heartbeat_loop(self, session: Connection) -> None:
        while True:
            await trio.sleep(session.heartbeat_sec)
            await session.ws.send_message(encode(self.core.heartbeat()))

    async def _ping_loop(self, session: Connection) -> None:
        interval = max(1.0, 2 * session.heartbeat_sec)
        timeout = max(PING_TIMEOUT_MIN_SEC, 3 * session.heartbeat_sec)
        while True:
            await trio.sleep(interval)
            try:
                with trio.fail_after(timeout):
                    await session.ws.ping()
            except trio.TooSlowError:
                log.warning("server did not answer a ping", extra={"timeout_sec": timeout})
                raise

    async def _resend_loop(self, session: Connection) -> None:
        while True:
            await trio.sleep(ACK_RESEND_SEC / 2)
            count = self.core.outbox.requeue_unacked(
                sent_before=trio.current_time() - ACK_RESEND_SEC
            )
            if count:
                log.info("resending unacknowledged job_finished", extra={"count": count})
                self.core.notify()

    def _on_resume(self, msg: Resume, session: Connection) -> None:
        marks = {(m.job_id, m.attempt): m.n for m in msg.marks}
        count = self.core.outbox.resume(marks)
        self.core.outbox.numbering = True
        session.resumed.set()
        if count:
            log.info("resending reports the server did not store", extra={"count": count})
        self.core.notify()

    def _on_ack(self, msg: FinishedAck) -> None:
        key = job_key(msg)
        if self.core.outbox.ack(key):
            self.core.finishes.delete(key)
            self.core.notify()


def _rejection_reason(exc: trio_websocket.ConnectionRejected) -> str:
    body = (exc.body or b"").decode("utf-8", errors="replace").strip()
    with contextlib.suppress(ValueError, AttributeError):
        data = json.loads(body)
        body = str(data.get("detail") or data.get("title") or body)
    return f"server refused the connection (HTTP {exc.status_code}): {body[:300] or 'no reason'}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, trio_websocket.ConnectionClosed):
        reason = exc.reason
        if reason is None:
            return "connection closed"
        return f"closed with {reason.code} ({reason.name}): {reason.reason or ''}".rstrip(": ")
    if isinstance(exc, trio_websocket.ConnectionRejected):
        return f"rejected with HTTP {exc.status_code}"
    if isinstance(exc, trio_websocket.HandshakeError) and exc.__cause__ is not None:
        return f"{type(exc.__cause__).__name__}: {exc.__cause__}"
    if isinstance(exc, trio.TooSlowError):
        return "timed out"
    return f"{type(exc).__name__}: {exc}"
