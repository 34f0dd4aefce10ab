"""A gang's job actor (docs/jobs.md "Multi-node jobs"): one run order per rank with its
environment, ``pulling`` once any rank is, ``running`` once every rank runs, a failing
rank ends the gang, a lost node requeues it whole; reports fenced by (attempt, node)."""

from __future__ import annotations

import json

from runplane.actors.job import JobActor
from runplane.actors.job_messages import (
    AgentFinished,
    AgentLogs,
    AgentMetric,
    AgentPhase,
    Assign,
    Cancel,
    LoseAttempt,
    OrderUndelivered,
)
from runplane.agent import protocol as p
from runplane.jobs import repo
from runplane.jobs.phase import Phase
from runplane.jobs.rows import JobRow
from runplane.jobs.view import job_view
from runplane.nodes import repo as nodes_repo
from runplane.persistence import Store
from runplane.runtime import Hub

from .fakes import Fakes, insert

GANG = Assign("node_a", ("node_a", "node_b", "node_c"), 29500)


def report(node: str, job_id: str, phase: str, attempt: int = 1) -> AgentPhase:
    return AgentPhase(node, p.JobPhase(job_id=job_id, attempt=attempt, phase=phase))  # type: ignore[arg-type]


def finish(node: str, job_id: str, outcome: str, error: str | None = None) -> AgentFinished:
    done = p.JobFinished(job_id=job_id, attempt=1, outcome=outcome, error=error, exit_code=0)  # type: ignore[arg-type]
    return AgentFinished(node, done)


async def row_of(store: Store, job_id: str) -> JobRow:
    row = await repo.get_row(store, job_id, None)
    assert row is not None
    return row


async def placed(store: Store, job_id: str) -> tuple[Fakes, JobActor]:
    fakes = Fakes()
    row = await insert(store, job_id)
    actor = JobActor(fakes.deps(store, Hub()), row)
    assert (await actor.handle(GANG)).taken
    return fakes, actor


async def test_each_rank_gets_its_order_and_the_gang_runs_once_every_rank_runs(
    store: Store,
) -> None:
    fakes, actor = await placed(store, "job_gang1")
    runs = [(node, o) for node, o in fakes.node.delivered if isinstance(o, p.Run)]
    assert [node for node, _ in runs] == ["node_a", "node_b", "node_c"]
    for rank, (_, order) in enumerate(runs):
        assert order.attempt == 1
        env = order.spec.env
        assert env["RUNPLANE_RANK"] == str(rank)
        assert env["RUNPLANE_WORLD_SIZE"] == "3"
        assert env["RUNPLANE_MASTER_ADDR"] == "node_a.example"
        assert env["RUNPLANE_MASTER_PORT"] == "29500"
        # only rank 0's agent checks it can listen on the port
        assert order.spec.master_port == (29500 if rank == 0 else None)

    job = "job_gang1"
    assert await actor.handle(report("node_b", job, "pulling"))
    assert (await row_of(store, job)).phase is Phase.PULLING  # any rank pulling
    assert await actor.handle(report("node_a", job, "running"))
    assert await actor.handle(report("node_c", job, "running"))
    assert (await row_of(store, job)).phase is Phase.PULLING  # rank 1 still pulls
    assert await actor.handle(report("node_x", job, "running")) is False  # not a rank's node
    assert await actor.handle(report("node_b", job, "running", attempt=2)) is False  # fenced
    assert await actor.handle(report("node_b", job, "running"))
    row = await row_of(store, job)
    assert row.phase is Phase.RUNNING and row.master_port == 29500
    view = job_view(row)
    assert view["nodes"] == 1  # the inserted spec is a plain one; the ranks come from Assign
    assert view["ranks"] == [
        {"rank": 0, "node_id": "node_a", "phase": "running"},
        {"rank": 1, "node_id": "node_b", "phase": "running"},
        {"rank": 2, "node_id": "node_c", "phase": "running"},
    ]

    # log entries and metrics carry the rank of the node that sent them
    # each rank's agent numbers its own reports: rank 0's n=1 is not rank 2's repeat
    lines = p.JobLogs(job_id=job, attempt=1, lines=[("stdout", "hello from 0")], n=1)
    assert await actor.handle(AgentLogs("node_a", lines))
    lines = p.JobLogs(job_id=job, attempt=1, lines=[("stdout", "hello from 2")], n=1)
    assert await actor.handle(AgentLogs("node_c", lines))
    assert await actor.handle(AgentLogs("node_c", lines))  # resent: stored once
    metric = p.JobMetric(job_id=job, attempt=1, values={"loss": 0.5})
    assert await actor.handle(AgentMetric("node_b", metric))
    events = await repo.events_after(store, job, 0, kinds=("log", "metric"))
    data = [d for e in events if (d := json.loads(e.data)).get("stream") != "system"]
    assert [(d.get("line"), d["rank"]) for d in data] == [
        ("hello from 0", 0),
        ("hello from 2", 2),
        (None, 1),
    ]
    assert data[-1]["rank"] == 1 and data[-1]["values"] == {"loss": 0.5}

    # the gang succeeds once every rank did
    assert await actor.handle(finish("node_a", job, "succeeded"))
    assert await actor.handle(finish("node_c", job, "succeeded"))
    assert (await row_of(store, job)).phase is Phase.RUNNING
    assert fakes.placement.told == []
    assert await actor.handle(finish("node_b", job, "succeeded"))
    row = await row_of(store, job)
    assert row.phase is Phase.SUCCEEDED
    assert [r.phase for r in row.ranks] == [Phase.SUCCEEDED] * 3
    assert fakes.placement.told == [("release", job)]


async def test_a_failing_rank_ends_the_gang_and_stops_the_others(store: Store) -> None:
    fakes, actor = await placed(store, "job_gang2")
    job = "job_gang2"
    for node in ("node_a", "node_b", "node_c"):
        assert await actor.handle(report(node, job, "running"))
    assert await actor.handle(finish("node_c", job, "succeeded"))
    before = len(fakes.node.delivered)
    assert await actor.handle(finish("node_b", job, "failed", "exit code 3"))
    row = await row_of(store, job)
    assert row.phase is Phase.FAILED
    assert row.error == "rank 1 failed: exit code 3"
    # rank 0 still ran: told to stop (rank 2 had ended, rank 1 is the one that failed)
    assert fakes.node.delivered[before:] == [("node_a", p.Cancel(job_id=job, attempt=1))]
    assert fakes.placement.told == [("release", job)]
    # the stopped rank's finish after the end changes nothing
    assert await actor.handle(finish("node_a", job, "cancelled")) is False


async def test_a_lost_rank_node_requeues_the_whole_gang(store: Store) -> None:
    fakes, actor = await placed(store, "job_gang3")
    job = "job_gang3"
    for node in ("node_a", "node_b", "node_c"):
        assert await actor.handle(report(node, job, "running"))
    before = len(fakes.node.delivered)
    assert await actor.handle(LoseAttempt(1, "node node_b lost: no heartbeat for 30 s"))
    row = await row_of(store, job)
    assert row.phase is Phase.QUEUED and row.attempts == 1 and row.ranks == ()
    cancels = fakes.node.delivered[before:]
    assert {node for node, _ in cancels} == {"node_a", "node_b", "node_c"}
    assert all(isinstance(o, p.Cancel) and o.attempt == 1 for _, o in cancels)
    assert fakes.placement.told == [("release", job), ("enqueue", job)]
    # the old attempt's reports are fenced off; the next assignment is attempt 2
    assert await actor.handle(report("node_a", job, "running")) is False
    assert (await actor.handle(Assign("node_d", ("node_d", "node_e"), 29501))).taken
    runs = [o for o in fakes.node.orders() if isinstance(o, p.Run) and o.attempt == 2]
    assert [o.spec.env["RUNPLANE_WORLD_SIZE"] for o in runs] == ["2", "2"]


async def test_a_cancel_stops_every_rank(store: Store) -> None:
    fakes, actor = await placed(store, "job_gang4")
    job = "job_gang4"
    assert await actor.handle(report("node_a", job, "pulling"))
    before = len(fakes.node.delivered)
    outcome = await actor.handle(Cancel())
    assert outcome.cancelled and outcome.killed_on_node
    assert [node for node, _ in fakes.node.delivered[before:]] == ["node_a", "node_b", "node_c"]
    assert (await row_of(store, job)).phase is Phase.CANCELLED


async def test_the_nodes_of_every_rank_expect_the_attempt(store: Store) -> None:
    """After a server restart each rank's node knows the gang's attempt runs there (its
    loss then requeues the gang), found by the ``ranks`` column."""
    _, actor = await placed(store, "job_gang5")
    assert await actor.handle(report("node_c", "job_gang5", "running"))
    assert await nodes_repo.expected_attempts(store, "node_c") == {"job_gang5": 1}
    assert await nodes_repo.expected_attempts(store, "node_a") == {"job_gang5": 1}
    assert await nodes_repo.expected_attempts(store, "node_") == {}  # no wildcard
    live = await nodes_repo.nodes_with_live_jobs(store)
    assert {"node_a", "node_b", "node_c"} <= set(live)


async def test_only_rank_0_collects_outputs(store: Store) -> None:
    fakes = Fakes()
    row = await insert(store, "job_gang6", outputs=[{"artifact": "model", "glob": "*.pt"}])
    actor = JobActor(fakes.deps(store, Hub()), row)
    assert (await actor.handle(GANG)).taken
    runs = [o for o in fakes.node.orders() if isinstance(o, p.Run)]
    assert [[g.glob for g in o.spec.outputs] for o in runs] == [["*.pt"], [], []]


async def test_a_rank_declining_its_order_sends_the_gang_back_uncounted(store: Store) -> None:
    fakes, actor = await placed(store, "job_gang7")
    assert await actor.handle(report("node_a", "job_gang7", "pulling"))
    declined = OrderUndelivered(1, "node declined it: no GPU free", counted=False)
    assert await actor.handle(declined)
    row = await row_of(store, "job_gang7")
    assert row.phase is Phase.QUEUED and row.attempts == 0 and row.ranks == ()
    assert fakes.placement.told == [("release", "job_gang7"), ("enqueue", "job_gang7")]
