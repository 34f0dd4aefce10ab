"""The streams service the HTTP routes call: a job's stream views, tickets, following a
stream (ring replay, live tail, lag markers), teleop sends and the recording. The job's
actor owns the streams' state (``runplane/streams/job_streams.py``); this only asks it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any
from weakref import WeakKeyDictionary

import trio

from runplane.actors.job_messages import JOBS, OpenStream, SendTeleop, TeleopOrder
from runplane.jobs.rows import JobRow
from runplane.persistence import Store
from runplane.runtime import (
    ActorGone,
    Cursor,
    Hub,
    Lagged,
    MailboxClosed,
    Registry,
    Ring,
    SharedTick,
)
from runplane.sessions import repo as sessions_repo
from runplane.settings import Settings
from runplane.stacks import Catalog
from runplane.stacks.models import StreamSpec
from runplane.streams import tickets, views
from runplane.streams.acks import TeleopAcks
from runplane.streams.chunks import StreamChunk, ring_name

#: Seconds without a chunk before a keepalive comment goes out.
IDLE_SEC = 15.0
#: Most chunks one SSE write carries (whatever is ready when the follower wakes).
LIVE_BATCH = 256
#: Writes per second all followers of one stream aim to stay under together: a follower
#: of a stream with many followers waits ``followers / WRITE_BUDGET`` seconds (at most
#: :data:`MAX_COALESCE_SEC`) after each write, so the chunks that arrived meanwhile go out
#: in one write. A write costs the server ~30 us on the lean SSE writer (the follow's
#: loop, the wake-up, the socket; ~65 us through Quart and hypercorn's ASGI send with
#: ``RUNPLANE_LEAN_LANES=0``): 8,000 writes/s is about a quarter of a core. 1,000
#: followers of a 100 Hz stream would otherwise need 100,000 writes/s; 16,000 and 50 ms
#: fell behind at 1,000 followers here (docs/streams.md "On the server").
WRITE_BUDGET = 8_000.0
#: The longest wait: a chunk waits at most this long for its follower's next write.
MAX_COALESCE_SEC = 0.1
#: Below this many followers a stream's chunks go out one write each (no wait).
COALESCE_FROM = 16
KEEPALIVE = b": keepalive\n\n"


#: each ring's shared coalescing timer (runtime/tick.py), gone with the ring
_TICKS: WeakKeyDictionary[Ring[StreamChunk], SharedTick] = WeakKeyDictionary()


def _tick_of(ring: Ring[StreamChunk]) -> SharedTick:
    tick = _TICKS.get(ring)
    if tick is None:
        tick = _TICKS[ring] = SharedTick()
    return tick


def lagged_frame(dropped: int, resume_seq: int) -> bytes:
    body = json.dumps({"dropped": dropped, "resume_seq": resume_seq}, separators=(",", ":"))
    return f"event: lagged\ndata: {body}\n\n".encode()


async def _next_frames(ring: Ring[StreamChunk], cursor: Cursor[StreamChunk]) -> bytes | None:
    """The next write of a follow: every chunk ready (the chunk's own bytes when it is
    one), a lagged marker, or a keepalive after :data:`IDLE_SEC` without one; None at the
    end. The idle timer (a cancel scope) is set only when the follower has to wait."""
    if cursor.next_seq <= ring.last_seq or ring.closed:
        return await _take(cursor)
    with trio.move_on_after(IDLE_SEC):
        return await _take(cursor)
    return KEEPALIVE


async def _take(cursor: Cursor[StreamChunk]) -> bytes | None:
    try:
        batch = await cursor.receive_many(LIVE_BATCH)
    except Lagged as lag:
        return lagged_frame(lag.dropped, cursor.next_seq)
    except trio.EndOfChannel:
        return None
    return b"".join(chunk.sse() for _, chunk in batch)  # one chunk: its cached bytes


@dataclass(frozen=True, slots=True)
class TeleopResult:
    """What became of one teleop frame: ``status`` 202 (delivered), 409 (not live) or 502
    (the node did not take or confirm it), with the reason."""

    status: int
    seq: int = 0
    reason: str = ""


class Streams:
    def __init__(
        self,
        store: Store,
        hub: Hub,
        registry: Registry,
        catalog: Catalog,
        settings: Settings,
        acks: TeleopAcks,
    ) -> None:
        self.store = store
        self.hub = hub
        self.registry = registry
        self.catalog = catalog
        self.settings = settings
        self.acks = acks
        #: counters for /metrics once it exists: chunks received and recorded (the job
        #: actors count them), teleop frames sent and failed, tickets minted
        self.counters = {
            "chunks": 0,
            "chunks_recorded": 0,
            "teleop_frames": 0,
            "teleop_failed": 0,
            "subscriptions": 0,
        }

    @property
    def runs(self) -> bool:
        """Whether the stream hub runs (``RUNPLANE_DISABLE`` does not name ``streams``)."""
        return self.settings.area_enabled("streams")

    async def views(self, row: JobRow) -> list[dict[str, Any]]:
        """The job's streams: its stack's, its session's teleop stream (a pod job's), then
        the ones it opened by writing to them."""
        declared = await self.declared(row)
        return views.stream_views(declared, views.states_of(row), hub_runs=self.runs)

    async def view(self, row: JobRow, name: str) -> dict[str, Any] | None:
        return next((v for v in await self.views(row) if v["name"] == name), None)

    async def declared(self, row: JobRow) -> list[StreamSpec]:
        """The streams ``row`` has before it writes any: its stack's, and for a session's
        pod job the session's teleop stream (docs/sessions.md)."""
        stack = self.catalog.get(row.stack)
        declared = list(stack.streams) if stack is not None else []
        if row.session_id is None:
            return declared
        session = await sessions_repo.get(self.store, row.session_id, None)
        if session is None:
            return declared
        return views.with_teleop_stream(declared, session.teleop_stream)

    def ticket(
        self, row: JobRow, name: str, session_id: str | None, *, teleop: bool, now: float
    ) -> tuple[str, str, int]:
        """(session id, ticket, expiry unix s) for ``name`` of ``row``."""
        session = session_id or tickets.new_session_id()
        expires = int(now) + tickets.TICKET_TTL_SEC
        token = tickets.mint(
            self.settings.secret_key_bytes(),
            tickets.Ticket(row.id, name, session, row.org_id, teleop, expires),
        )
        self.counters["subscriptions"] += 1
        return session, token, expires

    def check_ticket(self, token: str, job_id: str, name: str, now: float) -> tickets.Ticket:
        return tickets.verify(
            self.settings.secret_key_bytes(), token, job_id=job_id, stream=name, now=now
        )

    # -- following a stream

    async def _ring(self, job_id: str, name: str) -> Ring[StreamChunk] | None:
        """The live ring (from the job's actor), a finished job's ring still held for
        late replay, or None (then the store has what is left)."""
        try:
            ring = await self.registry.ask(JOBS, job_id, OpenStream(name))
        except (LookupError, ActorGone, MailboxClosed):
            ring = None
        if ring is None:
            ring = self.hub.find_ring(ring_name(job_id, name))
        return ring

    async def follow(self, job_id: str, name: str, since: int | None) -> AsyncIterator[bytes]:
        """SSE bytes of stream ``name``: the retained chunks after ``since`` (all retained
        when None), then the live tail until the job ends; ``event: lagged`` when the
        subscriber fell behind the ring; a keepalive every :data:`IDLE_SEC` idle."""
        ring = await self._ring(job_id, name)
        if ring is None:  # a finished job after a restart: its last stored chunks
            stored = await views.stored_chunks(
                self.store, job_id, name, last=self.settings.stream_ring
            )
            first = stored[0].seq if stored else 0
            if since is not None and stored and since + 1 < first:
                yield lagged_frame(first - since - 1, first)
            chunks = [c for c in stored if since is None or c.seq > since]
            if chunks:
                yield b"".join(c.sse() for c in chunks)
            return
        start = ring.first_seq - 1 if since is None else since
        with ring.subscribe(from_seq=start) as cursor:
            while (out := await _next_frames(ring, cursor)) is not None:
                yield out
                followers = ring.subscribers
                if followers >= COALESCE_FROM:  # one timer for the stream's followers
                    await _tick_of(ring).wait(min(MAX_COALESCE_SEC, followers / WRITE_BUDGET))

    # -- teleop

    async def teleop(self, job_id: str, name: str, frame: str) -> TeleopResult:
        try:
            order: TeleopOrder = await self.registry.ask(JOBS, job_id, SendTeleop(name, frame))
        except (LookupError, ActorGone, MailboxClosed):
            return TeleopResult(409, reason="the job is not running")
        if order.not_live is not None:
            return TeleopResult(409, reason=order.not_live)
        self.counters["teleop_frames"] += 1
        if not order.sent or order.key is None or order.pending is None:
            self.counters["teleop_failed"] += 1
            return TeleopResult(502, order.seq, "the job's node is not connected")
        if not await self.acks.wait(order.key, order.pending):
            self.counters["teleop_failed"] += 1
            return TeleopResult(502, order.seq, "the job's node did not confirm the frame in time")
        if not order.pending.ok:
            self.counters["teleop_failed"] += 1
            why = order.pending.error or "the agent could not write it"
            return TeleopResult(502, order.seq, f"the node could not deliver the frame: {why}")
        return TeleopResult(202, order.seq)

    async def recording(self, row: JobRow) -> dict[str, Any]:
        return await views.recording(self.store, row)
