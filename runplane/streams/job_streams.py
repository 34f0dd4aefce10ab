"""The streams of one job, as its job actor holds them: per stream its kind, chunk count,
last seq and last teleop seq (saved as the ``streams`` JSON column of its row, so a
restarted actor continues the numbering), a replay ring per stream on the runtime hub,
and the chunks kept for its recording (``stream_points``, up to :data:`RECORDING_CAP`).

A chunk is published on its ring first (subscribers see it at once), then written to the
store with the new counters in one transaction, before the actor takes its next message.
So a chunk may be seen by followers and never stored (the server killed, the write refused
while the store restarts). Its seq must not be given again: followers resume after the
last seq they saw (``Last-Event-ID``) and would skip the new chunk. Seqs are therefore
reserved in blocks of :data:`SEQ_BLOCK`, durably BEFORE any seq of a block is published,
and a rebuilt actor (a restart, a takeover) numbers on after the reservation: seqs rise
without repeating, with a gap of less than a block after each rebuild. Found by
``bench chaos`` (a follower saw a seq twice across a takeover).

This module owns the ``stream_points`` table (docs/architecture.md, "Tables and their
owners"): its inserts here, the retention janitor's purge (:func:`purge_stream_points`).
The counters in the job's row are written through the ``jobs`` owner
(``jobs_repo.save_streams``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from runplane.jobs import repo as jobs_repo
from runplane.persistence import Store, Tx, from_json, to_json
from runplane.runtime import Hub, Ring

from .chunks import DEFAULT_RING, RECORDING_CAP, StreamChunk, ring_name

#: seqs reserved in the store per durable write ahead of publishing (see the module doc)
SEQ_BLOCK = 1024


class ChunkIn(Protocol):
    """What an agent reports of one chunk (``protocol.StreamChunkIn``)."""

    @property
    def data(self) -> str: ...

    @property
    def encoding(self) -> str: ...

    @property
    def ts(self) -> int: ...


@dataclass(slots=True)
class StreamState:
    kind: str
    count: int = 0  # chunks received
    last_seq: int = 0
    teleop_seq: int = 0
    #: seqs up to this one may have been published (reserved in the store first)
    reserved: int = 0

    def saved(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "count": self.count,
            "last_seq": self.last_seq,
            "teleop_seq": self.teleop_seq,
            "reserved_seq": self.reserved,
        }


def parse_saved(raw: Any) -> dict[str, StreamState]:
    """The ``streams`` column (JSON text, a decoded mapping, or NULL)."""
    data = from_json(raw) if isinstance(raw, str) and raw else raw
    out: dict[str, StreamState] = {}
    for name, item in (data or {}).items():
        last = int(item.get("last_seq", 0))
        # numbering goes on after anything that may have been published (a reservation
        # written before a crash); a row from before reservations has none
        reserved = max(last, int(item.get("reserved_seq", last)))
        out[name] = StreamState(
            kind=str(item.get("kind", "data")),
            count=int(item.get("count", 0)),
            last_seq=reserved,
            teleop_seq=int(item.get("teleop_seq", 0)),
            reserved=reserved,
        )
    return out


class JobStreams:
    def __init__(
        self,
        job_id: str,
        store: Store,
        hub: Hub,
        *,
        declared: Mapping[str, str],
        saved: Any = None,
        ring_capacity: int = DEFAULT_RING,
        recording_cap: int = RECORDING_CAP,
        counters: dict[str, int] | None = None,
    ) -> None:
        self.job_id = job_id
        self.store = store
        self.hub = hub
        self.declared = dict(declared)  # name -> kind, from the job's stack
        self.states = parse_saved(saved)
        self.ring_capacity = ring_capacity
        self.recording_cap = recording_cap
        #: chunks kept in the store for the recording
        self.stored = min(recording_cap, sum(s.count for s in self.states.values()))
        #: the server's stream counters (``chunks``, ``chunks_recorded``), shared
        self.counters = counters if counters is not None else {}

    # -- chunks from the agent

    def _state(self, stream: str) -> StreamState:
        state = self.states.get(stream)
        if state is None:
            state = StreamState(kind=self.declared.get(stream, "data"))
            self.states[stream] = state
        return state

    def ring(self, stream: str) -> Ring[StreamChunk]:
        """The stream's replay ring (made on first use, numbered on from the last seq)."""
        name = ring_name(self.job_id, stream)
        ring = self.hub.find_ring(name)
        last = self.states[stream].last_seq if stream in self.states else 0
        if ring is not None and ring.last_seq != last:
            self.hub.discard_ring(name)  # out of step with what was counted: start afresh
            ring = None
        if ring is None:
            ring = self.hub.ring(name, next_seq=last + 1, capacity=self.ring_capacity)
        return ring

    async def receive(self, stream: str, chunks: Sequence[ChunkIn]) -> list[StreamChunk]:
        """Number, publish and store ``chunks`` of ``stream``; the chunks as published."""
        state = self._state(stream)
        if state.last_seq + len(chunks) > state.reserved:
            state.reserved = state.last_seq + len(chunks) + SEQ_BLOCK
            saved = to_json(self.saved())
            job_id = self.job_id
            await self.store.transaction(lambda tx: jobs_repo.save_streams(tx, job_id, saved))
        ring = self.ring(stream)
        out: list[StreamChunk] = []
        for item in chunks:
            state.last_seq += 1
            chunk = StreamChunk(
                seq=state.last_seq,
                stream=stream,
                kind=state.kind,
                encoding=item.encoding,
                ts=item.ts,
                data=item.data,
            )
            ring.publish(chunk)
            out.append(chunk)
        state.count += len(out)
        room = max(0, self.recording_cap - self.stored)
        keep = out[:room]
        self.stored += len(keep)
        self.counters["chunks"] = self.counters.get("chunks", 0) + len(out)
        self.counters["chunks_recorded"] = self.counters.get("chunks_recorded", 0) + len(keep)
        await self.store.transaction(self._save(keep))
        return out

    def _save(self, keep: Sequence[StreamChunk]) -> Any:
        rows = [(self.job_id, c.stream, c.seq, c.kind, c.encoding, c.ts, c.data) for c in keep]
        saved = to_json(self.saved())
        job_id = self.job_id

        def run(tx: Tx) -> None:
            if rows:
                tx.execute_many(
                    "INSERT INTO stream_points (job_id, stream, seq, kind, encoding, ts, data) "
                    "VALUES (?,?,?,?,?,?,?)",
                    rows,
                )
            jobs_repo.save_streams(tx, job_id, saved)

        return run

    # -- teleop

    async def next_teleop_seq(self, stream: str) -> int:
        """The next teleop frame number of ``stream`` (1, 2, ...), saved before it is used."""
        state = self._state(stream)
        state.teleop_seq += 1
        saved, job_id = to_json(self.saved()), self.job_id
        await self.store.transaction(lambda tx: jobs_repo.save_streams(tx, job_id, saved))
        return state.teleop_seq

    # -- views

    def saved(self) -> dict[str, Any]:
        return {name: state.saved() for name, state in self.states.items()}

    def close(self) -> None:
        """The job ended: its rings end (subscribers get what is left, then the end)."""
        for name in self.states:
            ring = self.hub.find_ring(ring_name(self.job_id, name))
            if ring is not None:
                ring.close()


async def purge_stream_points(store: Store, job_id: str, chunk: int) -> int:
    """Delete the job's stream points (the recording), ``chunk`` seqs per statement (the
    retention janitor's purge: ``runplane/jobs/retention.py``)."""
    row = await store.fetchone(
        "SELECT MAX(seq) AS top FROM stream_points WHERE job_id = ?", (job_id,)
    )
    top = int(row["top"]) if row and row["top"] is not None else 0
    deleted = 0
    for low in range(0, top, chunk):
        deleted += await store.execute(
            "DELETE FROM stream_points WHERE job_id = ? AND seq > ? AND seq <= ?",
            (job_id, low, low + chunk),
        )
    return deleted
