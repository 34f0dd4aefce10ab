"""The fleet index: maintenance operations, plans that leave it as it was, statistics."""

from __future__ import annotations

from typing import Any

import pytest

from runplane.placement import (
    FleetIndex,
    FleetStatistics,
    Gpu,
    JobDemand,
    NodeLoad,
    NodeShape,
    Placement,
    Unplaced,
    place,
    plan,
)
from runplane.placement.plan import Trial
from runplane.placement.queue import JobQueue, plan_groups

RTX = Gpu("RTX 4090", "nvidia", 24, "12.4")


def n(node_id: str, **kw: Any) -> NodeShape:
    base: dict[str, Any] = {"cpu_cores": 8, "ram_gb": 32, "max_concurrency": 2}
    base.update(kw)
    return NodeShape(node_id, **base)


def test_upsert_adds_replaces_and_keeps_load() -> None:
    fleet = FleetIndex()
    fleet.upsert(n("a"), NodeLoad(used_cpu=2))
    assert len(fleet) == 1 and "a" in fleet
    fleet.upsert(n("a", cpu_cores=16))  # re-registered with a new shape, no load given
    assert fleet.node("a").cpu_cores == 16
    assert fleet.load("a") == NodeLoad(used_cpu=2)
    fleet.upsert(n("a", cpu_cores=16), NodeLoad())  # same shape, new load
    assert fleet.load("a") == NodeLoad()


def test_remove_and_unknown_ids() -> None:
    fleet = FleetIndex([n("a"), n("b")])
    assert fleet.remove("a") is True
    assert fleet.remove("a") is False
    assert [node.id for node, _ in fleet] == ["b"]
    with pytest.raises(KeyError):
        fleet.update_load("a", NodeLoad())


def test_update_load_moves_nodes_between_free_and_full() -> None:
    fleet = FleetIndex([n("a", max_concurrency=1)])
    job = JobDemand("j")
    assert isinstance(place(job, fleet), Placement)
    fleet.update_load("a", NodeLoad(active_jobs=1))
    assert isinstance(place(job, fleet), Unplaced)
    assert fleet.statistics().walkable == 0
    fleet.update_load("a", NodeLoad())
    assert isinstance(place(job, fleet), Placement)


def test_disabling_and_enabling_a_node() -> None:
    fleet = FleetIndex([n("a")])
    fleet.upsert(n("a", disabled=True))
    assert isinstance(place(JobDemand("j"), fleet), Unplaced)
    fleet.upsert(n("a"))
    assert isinstance(place(JobDemand("j"), fleet), Placement)


def test_reserve_and_release() -> None:
    fleet = FleetIndex([n("a", gpus=(RTX,))])
    job = JobDemand("j", cpu_cores=2, ram_gb=4, gpu_count=1)
    assert fleet.reserve("a", job) == NodeLoad(2, 4, 1, 1)
    assert fleet.release("a", job) == NodeLoad()
    assert fleet.release("a", job) == NodeLoad()  # floored at zero


def _snapshot(fleet: FleetIndex) -> tuple[object, ...]:
    """What a decision reads of the fleet: nodes and loads, the shelves' sizes, what each
    stream of a job weighting every scorer takes, and where that job goes."""
    probe = JobDemand("probe", weights={"binpack": 1, "spread": 1, "dlperf": 1})
    nodes = sorted(fleet, key=lambda pair: pair[0].id)
    return (nodes, fleet.statistics(), fleet.stream_takes(probe), place(probe, fleet))


def test_a_plan_leaves_the_fleet_as_it_was() -> None:
    """A plan reserves on the fleet itself (a Trial) and puts every load back: here it
    fills all 600 nodes (several sorted-list blocks; every shelf emptied, so rebuilt on
    the way back), and the fleet answers as before, for plan and for plan_groups."""
    fleet = FleetIndex([n(f"n{i:03d}", dlperf=i % 7) for i in range(600)])
    queue = [JobDemand(f"j{i:04d}", cpu_cores=4) for i in range(1_300)]
    before = _snapshot(fleet)
    planned = plan(queue, fleet)
    assert len(planned.assignments) == 1_200 and len(planned.waiting) == 100
    assert all(load.active_jobs == 2 for load in planned.loads.values())
    assert _snapshot(fleet) == before
    grouped = plan_groups(JobQueue(queue), fleet)
    assert [(a.job_id, a.node_id) for a in grouped.assignments] == [
        (a.job_id, a.node_id) for a in planned.assignments
    ]
    assert _snapshot(fleet) == before


def test_a_trial_puts_loads_back_when_it_fails() -> None:
    fleet = FleetIndex([n("a"), n("b")])
    with pytest.raises(RuntimeError), Trial(fleet) as work:
        assert work.reserve("a", JobDemand("j", cpu_cores=8)) == NodeLoad(8, 2, 0, 1)
        work.reserve("a", JobDemand("k"))
        assert fleet.load("a") == NodeLoad(9, 4, 0, 2)
        raise RuntimeError("a plan failing midway")
    assert fleet.load("a") == NodeLoad() and fleet.load("b") == NodeLoad()
    assert fleet.stream_takes(JobDemand("j", cpu_cores=8))["fit"] == ["a", "b"]


def test_statistics() -> None:
    fleet = FleetIndex(
        [
            n("a"),
            n("b"),
            n("c", arch="arm64"),
            n("d", gpus=(RTX,)),
            n("e", gpus=(RTX,), capabilities=frozenset({"kvm"})),
            (n("f"), NodeLoad(active_jobs=2)),
            n("g", disabled=True),
        ]
    )
    assert fleet.statistics() == FleetStatistics(
        nodes=7, disabled=1, walkable=5, classes=4, shapes=3, shelves=3
    )


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        FleetIndex(per_stream=0)
    with pytest.raises(ValueError):
        FleetIndex(stream_budget=-1)


def test_stream_takes_explain_a_decision() -> None:
    fleet = FleetIndex([n(f"n{i}", reliability=i / 10) for i in range(10)], per_stream=2)
    takes = fleet.stream_takes(JobDemand("j", weights_preset="interactive"))
    assert list(takes) == ["fit", "roomy", "empty", "dlperf", "reliable"]
    assert takes["reliable"] == ["n9", "n8"]
    assert all(len(ids) == 2 for ids in takes.values())
