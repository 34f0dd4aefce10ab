"""Preemption's choice (runplane/placement/preempt.py): the victims are the smallest set
that lets the waiting job fit, never a non-preemptible job, never one of equal or higher
priority, only within the org unless the node's tier is opened to cross-org preemption;
and the holds that keep what they free for the waiting job."""

from __future__ import annotations

from itertools import combinations
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runplane.placement import FleetIndex, JobDemand, NodeLoad, NodeShape, first_rejection
from runplane.placement.model import UID_PER_JOB
from runplane.placement.preempt import (
    Holds,
    Preemptibles,
    Preemption,
    Running,
    choose,
    may_preempt,
    set_key,
)


def node(node_id: str, **kw: Any) -> NodeShape:
    base: dict[str, Any] = {"cpu_cores": 8, "ram_gb": 32, "max_concurrency": 2}
    base.update(kw)
    return NodeShape(node_id, **base)


def job(job_id: str, priority: int = 100, *, org: str = "o", **kw: Any) -> JobDemand:
    kw.setdefault("cpu_cores", 1)
    return JobDemand(job_id, priority=priority, org_id=org, **kw)


def victim(job_id: str, priority: int = 10, *, preemptible: bool = True, **kw: Any) -> JobDemand:
    return job(job_id, priority, preemptible=preemptible, preempt_grace_sec=5, **kw)


def fleet_of(
    placed: dict[str, list[tuple[JobDemand, int]]], shapes: dict[str, NodeShape]
) -> tuple[FleetIndex, Preemptibles]:
    """The fleet with each node's load made of its placed jobs, and the preemptible ones."""
    fleet, running = FleetIndex(), Preemptibles()
    for node_id, shape in shapes.items():
        load = NodeLoad()
        for demand, started in placed.get(node_id, []):
            load = load.plus(demand.cpu, demand.ram, demand.gpus, 1, demand.org_id)
            if demand.preemptible:
                running.add(Running(demand, node_id, started))
        fleet.upsert(shape, load)
    return fleet, running


def test_two_low_jobs_fill_the_node_one_is_enough_for_the_high_one() -> None:
    fleet, running = fleet_of(
        {"n1": [(victim("low-a"), 1), (victim("low-b"), 2)]}, {"n1": node("n1")}
    )
    high = job("high", 200)
    assert first_rejection(fleet.node("n1"), fleet.load("n1"), high) is not None
    found = choose(high, fleet, running)
    # one victim frees the slot; of two equals, the most recently started goes
    assert found == Preemption("high", "n1", ("low-b",), 5)
    assert found.reason() == "preempting low-b on node n1 (grace 5 s)"


def test_lowest_priority_goes_first_then_most_recent() -> None:
    fleet, running = fleet_of(
        {"n1": [(victim("p20", 20), 9), (victim("p10", 10), 1)]}, {"n1": node("n1")}
    )
    found = choose(job("high", 200), fleet, running)
    assert found is not None and found.victims == ("p10",)


def test_never_a_non_preemptible_or_an_equal_or_higher_job() -> None:
    placed = {
        "n1": [(victim("fixed", 10, preemptible=False), 1), (victim("equal", 200), 2)],
        "n2": [(victim("higher", 300), 1), (victim("fixed2", 1, preemptible=False), 2)],
    }
    fleet, running = fleet_of(placed, {"n1": node("n1"), "n2": node("n2")})
    assert choose(job("high", 200), fleet, running) is None


def test_fewest_victims_wins_over_lower_priorities() -> None:
    # n1: two small jobs must both go; n2: one big job of a higher (still lower) priority
    placed = {
        "n1": [(victim("a", 1, cpu_cores=4), 1), (victim("b", 1, cpu_cores=4), 2)],
        "n2": [(victim("big", 50, cpu_cores=8), 1)],
    }
    shapes = {"n1": node("n1", max_concurrency=4), "n2": node("n2", max_concurrency=4)}
    fleet, running = fleet_of(placed, shapes)
    found = choose(job("high", 200, cpu_cores=8), fleet, running)
    assert found is not None and (found.node_id, found.victims) == ("n2", ("big",))


def test_cross_org_only_on_the_tiers_the_operator_opened() -> None:
    fleet, running = fleet_of(
        {"n1": [(victim("theirs", 10, org="other"), 1), (victim("theirs2", 10, org="other"), 2)]},
        {"n1": node("n1")},
    )
    high = job("high", 200, org="o")
    assert choose(high, fleet, running) is None
    assert choose(high, fleet, running, cross_org_tiers=("trusted",)) is None
    found = choose(high, fleet, running, cross_org_tiers=("community",))
    # a node whose jobs share one uid runs one org at a time: both must go
    assert found is not None and set(found.victims) == {"theirs", "theirs2"}
    shared = node("n1", capabilities=frozenset({UID_PER_JOB}))
    fleet, running = fleet_of(
        {"n1": [(victim("theirs", 10, org="other"), 1), (victim("theirs2", 10, org="other"), 2)]},
        {"n1": shared},
    )
    found = choose(high, fleet, running, cross_org_tiers=("community",))
    assert found is not None and found.victims == ("theirs2",)


def test_a_victim_in_flight_is_not_taken_twice() -> None:
    fleet, running = fleet_of(
        {"n1": [(victim("low-a"), 1), (victim("low-b"), 2)]}, {"n1": node("n1")}
    )
    found = choose(job("high", 200), fleet, running, busy={"low-b"})
    assert found is not None and found.victims == ("low-a",)
    assert choose(job("high", 200), fleet, running, busy={"low-a", "low-b"}) is None


def test_static_misfits_are_not_preempted_for() -> None:
    fleet, running = fleet_of({"n1": [(victim("low"), 1)]}, {"n1": node("n1", max_concurrency=1)})
    assert choose(job("huge", 200, cpu_cores=64), fleet, running) is None


def test_past_the_exact_search_the_greedy_one_still_takes_few_and_low() -> None:
    placed = [(victim(f"v{i:02}", 10 + i % 4), i) for i in range(16)]  # 16 cores taken
    shape = node("n1", cpu_cores=16, max_concurrency=20)
    fleet, running = fleet_of({"n1": placed}, {"n1": shape})
    found = choose(job("high", 200, cpu_cores=3), fleet, running)
    assert found is not None and len(found.victims) == 3  # 3 cores: 3 jobs, no more
    # the lowest priority (10: v00, v04, v08, v12), the most recent of them first
    assert found.victims == ("v12", "v08", "v04")


def test_holds_keep_what_victims_free_until_the_last_is_gone() -> None:
    holds = Holds()
    a, b, high = victim("a"), victim("b"), job("high", 200)
    holds.start(Preemption("high", "n1", ("a", "b"), 5), high)
    assert "high" in holds and set(holds.victims()) == {"a", "b"}
    gone = holds.victim_gone(a)
    assert gone is not None and gone[1] is False
    gone = holds.victim_gone(b)
    assert gone is not None and gone[1] is True and gone[0].freed == [a, b]
    assert "high" not in holds and not list(holds.victims())
    assert holds.victim_gone(victim("other")) is None


def test_a_dropped_hold_forgets_its_pending_victims() -> None:
    holds = Holds()
    holds.start(Preemption("high", "n1", ("a", "b"), 5), job("high", 200))
    assert holds.on_node("n1") == ["high"]
    holds.victim_gone(victim("a"))
    dropped = holds.drop("high")
    assert dropped is not None and dropped.pending == {"b"}
    assert holds.victim_gone(victim("b")) is None and len(holds) == 0


# --- properties --------------------------------------------------------------------------

_running = st.tuples(
    st.integers(0, 3),  # priority
    st.booleans(),  # preemptible
    st.sampled_from(["o", "other"]),  # org
    st.integers(1, 4),  # cpu cores
    st.integers(0, 1),  # gpus
)


@settings(max_examples=150, deadline=None)
@given(
    on_nodes=st.lists(st.lists(_running, max_size=5), min_size=1, max_size=3),
    want_cpu=st.integers(1, 8),
    want_gpu=st.integers(0, 2),
    priority=st.integers(0, 4),
    open_tier=st.booleans(),
)
def test_the_victim_set_is_allowed_sufficient_and_minimal(
    on_nodes: list[list[tuple[int, bool, str, int, int]]],
    want_cpu: int,
    want_gpu: int,
    priority: int,
    open_tier: bool,
) -> None:
    shapes: dict[str, NodeShape] = {}
    placed: dict[str, list[tuple[JobDemand, int]]] = {}
    started = 0
    for i, jobs in enumerate(on_nodes):
        node_id = f"n{i}"
        shapes[node_id] = node(node_id, max_concurrency=4, gpus=_gpus(2))
        placed[node_id] = []
        for k, (prio, preemptible, org, cpu, gpus) in enumerate(jobs):
            started += 1
            demand = job(
                f"j{i}-{k}", prio, org=org, cpu_cores=cpu, gpu_count=gpus,
                preemptible=preemptible, preempt_grace_sec=1,
            )  # fmt: skip
            placed[node_id].append((demand, started))
    fleet, running = fleet_of(placed, shapes)
    high = job("high", priority, cpu_cores=want_cpu, gpu_count=want_gpu)
    tiers = ("community",) if open_tier else ()
    found = choose(high, fleet, running, cross_org_tiers=tiers)
    allowed = {
        node_id: [
            Running(d, node_id, s)
            for d, s in placed[node_id]
            if may_preempt(high, d, shapes[node_id], tiers)
        ]
        for node_id in shapes
    }
    best = _brute_force(high, fleet, allowed)
    if found is None:
        assert best is None
        return
    assert best is not None
    chosen = [r for r in allowed[found.node_id] if r.job_id in found.victims]
    assert len(chosen) == len(found.victims)  # every victim is one it may preempt
    for r in chosen:
        assert r.demand.preemptible and r.demand.priority < high.priority
        assert r.demand.org_id == high.org_id or open_tier
    assert _fits(high, fleet, found.node_id, chosen)
    assert (set_key(chosen), found.node_id) == best  # no smaller (or preferred) set fits


def _gpus(count: int) -> tuple[Any, ...]:
    from runplane.placement import Gpu

    return tuple(Gpu("A100", "nvidia", 80, "12.4") for _ in range(count))


def _fits(high: JobDemand, fleet: FleetIndex, node_id: str, gone: list[Running]) -> bool:
    load = fleet.load(node_id)
    for r in gone:
        d = r.demand
        load = load.plus(-d.cpu, -d.ram, -d.gpus, -1, d.org_id)
    return first_rejection(fleet.node(node_id), load, high) is None


def _brute_force(
    high: JobDemand, fleet: FleetIndex, allowed: dict[str, list[Running]]
) -> tuple[Any, str] | None:
    best: tuple[Any, str] | None = None
    for node_id, candidates in allowed.items():
        for size in range(1, len(candidates) + 1):
            for combo in combinations(candidates, size):
                if _fits(high, fleet, node_id, list(combo)):
                    key = (set_key(combo), node_id)
                    best = key if best is None or key < best else best
    return best
