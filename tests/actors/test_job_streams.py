"""A job's streams in its actor: chunks numbered per stream, published on the ring and
stored, reports of another node or attempt refused, teleop frames numbered and sent to the
node (202 once confirmed, 502 when refused or unanswered, 409 when not running), and the
numbering carried over a restart of the whole tree; the recording cap."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from runplane.agent.protocol import StreamChunkIn
from runplane.jobs import repo
from runplane.persistence import Store
from runplane.runtime import Hub
from runplane.streams import views
from runplane.streams.chunks import ring_name
from runplane.streams.job_streams import SEQ_BLOCK, JobStreams

from .harness import Agent, agent_stream, eventually, running_root, store, submit

__all__ = ["store"]

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)


def chunks(*values: int) -> tuple[StreamChunkIn, ...]:
    return tuple(StreamChunkIn(data=f'{{"v": {v}}}', encoding="json", ts=1000 + v) for v in values)


async def running_job(root: object, agent: Agent) -> str:
    job_id = await submit(root)  # type: ignore[arg-type]

    async def placed() -> bool:
        return job_id in agent.runs

    await eventually(placed, "placed")
    await agent.start(job_id)
    return job_id


async def test_chunks_teleop_and_a_restart(store: Store, tmp_path: Path) -> None:
    async with running_root(store, tmp_path, stream_ring="16") as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        await agent.connect()
        job_id = await running_job(root, agent)
        attempt = agent.runs[job_id]
        assert await agent.report(
            job_id, agent_stream("node_a", job_id, attempt, "t", chunks(1, 2, 3))
        )
        assert await agent.report(job_id, agent_stream("node_a", job_id, attempt, "u", chunks(9)))
        # another node's or attempt's chunks are refused
        assert not await agent.report(
            job_id, agent_stream("node_b", job_id, attempt, "t", chunks(4))
        )
        assert not await agent.report(
            job_id, agent_stream("node_a", job_id, attempt + 1, "t", chunks(4))
        )
        assert root.streams.counters["chunks"] == 4  # refused reports do not count
        ring = root.hub.find_ring(ring_name(job_id, "t"))
        assert ring is not None and ring.capacity == 16
        assert [(s, c.data) for s, c in ring.retained()] == [
            (1, '{"v": 1}'),
            (2, '{"v": 2}'),
            (3, '{"v": 3}'),
        ]
        stored = await views.stored_chunks(root.store, job_id, "t")
        assert [(c.seq, c.ts, c.kind) for c in stored] == [
            (1, 1001, "data"),
            (2, 1002, "data"),
            (3, 1003, "data"),
        ]
        # teleop: numbered per stream, sent to the node, 202 once the agent confirmed
        first = await root.streams.teleop(job_id, "t", '{"push":1}')
        second = await root.streams.teleop(job_id, "t", '{"push":2}')
        assert (first.status, first.seq, second.status, second.seq) == (202, 1, 202, 2)
        assert [(m.stream, m.seq, m.frame, m.attempt) for m in agent.teleops] == [
            ("t", 1, '{"push":1}', attempt),
            ("t", 2, '{"push":2}', attempt),
        ]
        agent.teleop_answer = (False, "No space left on device")
        refused = await root.streams.teleop(job_id, "t", "{}")
        assert refused.status == 502 and "No space left on device" in refused.reason
        agent.teleop_answer = None  # the agent never answers
        with trio.fail_after(10):
            silent = await root.streams.teleop(job_id, "t", "{}")
        assert silent.status == 502 and "did not confirm" in silent.reason
        assert len(root.teleop_acks) == 0  # nothing left waiting
        assert root.streams.counters["teleop_frames"] == 4
        assert root.streams.counters["teleop_failed"] == 2
    # the whole tree again on the same store: numbering goes on after the seqs reserved
    # (3 used + a block of 1,024): a seq published but never stored (a crash between the
    # two) is never given again, so a follower resuming after it misses nothing
    async with running_root(store, tmp_path, stream_ring="16") as (root, agents):
        agent = Agent(root, agents, "node_a", cpu=4)
        agent.runs[job_id] = attempt
        await agent.connect()
        assert await agent.report(job_id, agent_stream("node_a", job_id, attempt, "t", chunks(5)))
        ring = root.hub.find_ring(ring_name(job_id, "t"))
        assert ring is not None and [s for s, _ in ring.retained()] == [3 + SEQ_BLOCK + 1]
        again = await root.streams.teleop(job_id, "t", "{}")
        assert (again.status, again.seq) == (202, 5)
        row = await repo.get_row(root.store, job_id, None)
        assert row is not None and row.streams is not None
        assert row.streams["t"] == {
            "kind": "data",
            "count": 4,
            "last_seq": 3 + SEQ_BLOCK + 1,
            "teleop_seq": 5,
            "reserved_seq": 3 + SEQ_BLOCK + 1 + SEQ_BLOCK,
        }
        await agent.finish(job_id)
        late = await root.streams.teleop(job_id, "t", "{}")
        assert late.status == 409
        # the ring of a finished job is closed: a follower gets what is left, then the end
        ring = root.hub.find_ring(ring_name(job_id, "t"))
        assert ring is not None and ring.closed


async def test_the_recording_keeps_up_to_its_cap(store: Store, tmp_path: Path) -> None:
    await store.execute(
        "INSERT INTO jobs (id, org_id, project, submitted_by, stack, image, phase, priority, "
        "mode, seed, spec_hash, spec, attempt, attempts, final_metrics, artifacts, event_seq, "
        "log_lines, log_dropped, created_at, updated_at) VALUES "
        "('job_cap', 'org_default', '', 'u', 'shell', 'i', 'running', 100, 'run', 0, 'h', "
        "'{}', 1, 0, '{}', '[]', 0, 0, 0, 0, 0)",
        (),
    )
    streams = JobStreams("job_cap", store, Hub(), declared={"t": "telemetry"}, recording_cap=5)
    await streams.receive("t", chunks(1, 2, 3))
    await streams.receive("t", chunks(4, 5, 6, 7))
    row = await repo.get_row(store, "job_cap", None)
    assert row is not None
    recording = await views.recording(store, row)
    assert [p["seq"] for p in recording["stream_points"]] == [1, 2, 3, 4, 5]
    assert recording["truncated"] == {"stream_points": True}
    assert recording["streams"] == [{"name": "t", "kind": "telemetry", "count": 7}]
