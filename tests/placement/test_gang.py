"""Gangs: all ranks at once on distinct nodes, or nothing held (runplane/placement/gang.py)."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runplane.placement import FleetIndex, JobDemand, NodeLoad, NodeShape, Unplaced, place, plan
from runplane.placement.fairshare import demand_vector
from runplane.placement.gang import GangPlacement, place_gang
from runplane.placement.queue import JobQueue, plan_groups


def n(node_id: str, **kw: Any) -> NodeShape:
    base: dict[str, Any] = {"cpu_cores": 16, "ram_gb": 64, "max_concurrency": 4}
    base.update(kw)
    return NodeShape(node_id, **base)


def gang(job_id: str, ranks: int, **kw: Any) -> JobDemand:
    return JobDemand(job_id, nodes=ranks, **kw)


def test_a_gang_goes_to_distinct_nodes_rank_0_on_the_best() -> None:
    # a binpacking job prefers the fullest node: "b" is half busy
    fleet = FleetIndex([(n("a"), NodeLoad()), (n("b"), NodeLoad(used_cpu=8, active_jobs=1))])
    job = gang("g", 2, cpu_cores=4, weights_preset="batch")
    single = place(JobDemand("s", cpu_cores=4, weights_preset="batch"), fleet)
    outcome = place(job, fleet)
    assert isinstance(outcome, GangPlacement)
    assert len(set(outcome.node_ids)) == 2
    assert not isinstance(single, Unplaced)
    assert outcome.node_ids[0] == single.node_id  # rank 0: where a single rank would go
    result = plan([job], fleet)
    assert [(a.rank, a.node_id) for a in result.assignments] == list(enumerate(outcome.node_ids))
    # each rank reserved its share on its own node
    assert result.loads["a"].used_cpu == 4 and result.loads["b"].used_cpu == 12


def test_a_gang_that_does_not_fit_whole_holds_nothing_and_says_why() -> None:
    fleet = FleetIndex(
        [(n("a"), NodeLoad()), (n("b"), NodeLoad(active_jobs=4)), (n("c"), NodeLoad())]
    )
    before = sorted(fleet, key=lambda p: p[0].id)
    outcome = place_gang(gang("g", 3), fleet)
    assert isinstance(outcome, Unplaced)
    assert not outcome.static  # "b" may free up
    assert outcome.reason == (
        "gang of 3 ranks: 2 nodes fit now (waiting for free capacity: 1 node matches "
        "but is busy (1 node has no free job slot))"
    )
    assert sorted(fleet, key=lambda p: p[0].id) == before  # nothing held
    # a plain job queued behind it still runs (the gang holds no node)
    result = plan([gang("g", 3, priority=200), JobDemand("plain")], fleet)
    assert [a.job_id for a in result.assignments] == ["plain"]
    assert "g" in result.waiting


def test_a_gang_larger_than_the_fleet_waits_statically() -> None:
    fleet = FleetIndex([(n("a"), NodeLoad()), (n("b"), NodeLoad())])
    outcome = place_gang(gang("g", 3), fleet)
    assert isinstance(outcome, Unplaced) and outcome.static
    assert outcome.reason == "gang of 3 ranks: 2 nodes fit now"


def test_two_gangs_never_split_the_fleet_between_them() -> None:
    """Two 2-rank gangs over 3 free nodes: the first goes whole, the second waits whole
    (no partial hold to deadlock on), in both planners."""
    fleet = FleetIndex([(n(x, max_concurrency=1), NodeLoad()) for x in "abc"])
    jobs = [gang("g1", 2, created_at=1), gang("g2", 2, created_at=2)]
    for result in (plan(jobs, fleet), plan_groups(JobQueue(jobs), fleet)):
        assert {a.job_id for a in result.assignments} == {"g1"}
        assert len(result.assignments) == 2
    assert all(load == NodeLoad() for _, load in fleet)


def test_fair_share_counts_every_rank() -> None:
    assert demand_vector(gang("g", 3, cpu_cores=2, ram_gb=4, gpu_count=0)) == (6.0, 12.0, 0.0)


def test_the_gang_signature_differs_from_its_single_twin() -> None:
    single, twin = JobDemand("a", cpu_cores=2), gang("b", 2, cpu_cores=2)
    assert single.fit_signature != twin.fit_signature
    assert single.fit_signature == JobDemand("c", cpu_cores=2).fit_signature


@settings(max_examples=60, deadline=None)
@given(
    loads=st.lists(st.sampled_from([0, 1, 2, 3, 4]), min_size=1, max_size=8),
    ranks=st.integers(2, 6),
)
def test_whole_or_nothing(loads: list[int], ranks: int) -> None:
    """Placed: exactly ``ranks`` distinct nodes that each had a free slot; else none,
    and the fleet is unchanged."""
    fleet = FleetIndex([(n(f"n{i}"), NodeLoad(active_jobs=x)) for i, x in enumerate(loads)])
    before = sorted(fleet, key=lambda p: p[0].id)
    free = sum(1 for x in loads if x < 4)
    outcome = place_gang(gang("g", ranks), fleet)
    assert sorted(fleet, key=lambda p: p[0].id) == before
    if free >= ranks:
        assert isinstance(outcome, GangPlacement)
        assert len(set(outcome.node_ids)) == ranks
        assert all(fleet.load(x).active_jobs < 4 for x in outcome.node_ids)
    else:
        assert isinstance(outcome, Unplaced)
        assert outcome.static == (len(loads) < ranks)
