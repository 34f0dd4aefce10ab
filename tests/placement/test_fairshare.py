"""Fair share between orgs (runplane/placement/fairshare.py): the share arithmetic, the
decay, and the order a plan gives orgs."""

from __future__ import annotations

import math

import pytest

from runplane.placement import FleetIndex, JobDemand, NodeLoad, NodeShape
from runplane.placement.fairshare import (
    START_CHARGE_SEC,
    FairShare,
    Standing,
    dominant,
)
from runplane.placement.model import SHARED_UID_OK
from runplane.placement.plan import plan
from runplane.placement.queue import JobQueue, plan_groups

CAPACITY = (16.0, 64.0, 4.0)


def job(job_id: str, org: str | None, *, created: int = 0, cpu: float = 1, gpus: int = 0,
        priority: int = 100) -> JobDemand:  # fmt: skip
    return JobDemand(
        job_id=job_id, org_id=org, created_at=created, cpu_cores=cpu, ram_gb=1,
        gpu_count=gpus, priority=priority,
    )  # fmt: skip


def node(slots: int, *, cpu: float = 16, gpus: int = 0, node_id: str = "n1") -> FleetIndex:
    from runplane.placement import Gpu

    shape = NodeShape(
        id=node_id, cpu_cores=cpu, ram_gb=64, disk_gb=100, max_concurrency=slots,
        capabilities=frozenset({SHARED_UID_OK}),  # several orgs at once
        gpus=tuple(Gpu("a100", vram_gb=80, cuda="12.4") for _ in range(gpus)),
    )  # fmt: skip
    return FleetIndex([(shape, NodeLoad())])


def test_dominant_share_is_the_largest_resource_share() -> None:
    assert dominant((0, 0, 0), CAPACITY) == (0.0, "cpu")
    assert dominant((4, 8, 0), CAPACITY) == (0.25, "cpu")
    assert dominant((1, 32, 0), CAPACITY) == (0.5, "ram")
    assert dominant((1, 1, 3), CAPACITY) == (0.75, "gpu")
    # a resource the fleet has none of counts for nothing
    assert dominant((1, 1, 2), (16.0, 64.0, 0.0)) == (1 / 16, "cpu")


def test_usage_decays_with_the_half_life() -> None:
    fair = FairShare(half_life=100.0)
    fair.set_node("n1", 16, 64, 0)
    big = job("a1", "org_a", cpu=8)  # half the CPUs
    fair.assign(big, now=0.0)
    tau = 100.0 / math.log(2)
    fair.advance(100.0)  # one half-life at share 0.5: 0.5 * tau * (1 - 1/2)
    assert fair.orgs["org_a"].history == pytest.approx(0.5 * tau * 0.5)
    fair.release(big, now=100.0)
    fair.advance(200.0)  # nothing running: the history halves
    assert fair.orgs["org_a"].history == pytest.approx(0.5 * tau * 0.25)
    row = fair.rows(200.0, {})[0]
    assert (row.org_id, row.share, row.running_jobs) == ("org_a", 0.0, 0)
    assert row.usage == pytest.approx(0.5 * tau * 0.25)
    # a long-decayed org with nothing running is forgotten
    fair.advance(200.0 + 100 * 60)
    assert fair.orgs == {}


def test_the_key_is_usage_over_weight_with_the_start_charge() -> None:
    shares = Standing(CAPACITY).set("a", history=10.0, used=(8, 0, 0), weight=2.0)
    assert shares.key("a") == pytest.approx((10.0 + START_CHARGE_SEC * 0.5) / 2.0)
    assert shares.key("nobody") == 0.0
    shares.take("a", job("x", "a", cpu=8))
    assert shares.key("a") == pytest.approx((10.0 + START_CHARGE_SEC * 1.0) / 2.0)


def test_rows_show_weights_capacity_shares_and_waiting_jobs() -> None:
    fair = FairShare(weights={"org_b": 3.0})
    fair.set_node("n1", 16, 64, 4)
    fair.assign(job("a1", "org_a", gpus=2), now=0.0)
    rows = {r.org_id: r for r in fair.rows(0.0, {"org_b": 5, None: 1})}
    assert set(rows) == {"org_a", "org_b"}
    assert (rows["org_a"].share, rows["org_a"].dominant_resource) == (0.5, "gpu")
    assert rows["org_a"].running == (1.0, 1.0, 2.0)
    assert (rows["org_b"].weight, rows["org_b"].waiting_jobs, rows["org_b"].key) == (3.0, 5, 0)
    # only one org's row: zeros for an org placement knows nothing of
    (only,) = fair.rows(0.0, {}, only="org_z")
    assert (only.org_id, only.weight, only.usage, only.waiting_jobs) == ("org_z", 1.0, 0.0, 0)


def test_a_node_s_capacity_is_counted_once_and_dropped() -> None:
    fair = FairShare()
    fair.set_node("n1", 16, 64, 4)
    fair.set_node("n1", 16, 64, 4)  # a re-register
    fair.set_node("n2", 8, 32, 0)
    assert fair.capacity == (24.0, 96.0, 4.0)
    fair.drop_node("n1")
    assert fair.capacity == (8.0, 32.0, 0.0)


def _order(queue: list[JobDemand], fleet: FleetIndex, shares: Standing | None) -> list[str]:
    again = shares.copy() if shares is not None else None
    grouped = [a.job_id for a in plan_groups(JobQueue(queue), fleet, shares=shares).assignments]
    flat = [a.job_id for a in plan(queue, fleet, shares=again).assignments]
    assert grouped == flat
    return grouped


def test_two_orgs_take_turns_in_one_plan() -> None:
    # org A submitted everything first: queue order alone gives it every slot
    queue = [job(f"a{i}", "org_a", created=i) for i in range(4)]
    queue += [job(f"b{i}", "org_b", created=10 + i) for i in range(4)]
    fleet = node(4)
    assert _order(queue, fleet, None) == ["a0", "a1", "a2", "a3"]
    assert _order(queue, fleet, Standing(CAPACITY)) == ["a0", "b0", "a1", "b1"]


def test_weights_two_to_one_give_two_slots_to_one() -> None:
    queue = [job(f"a{i}", "org_a", created=i) for i in range(6)]
    queue += [job(f"b{i}", "org_b", created=i) for i in range(6)]
    shares = Standing(CAPACITY).set("org_a", weight=2.0)
    got = _order(queue, node(6), shares)
    assert sorted(got) == ["a0", "a1", "a2", "a3", "b0", "b1"]


def test_the_org_with_less_history_goes_first_whatever_the_priority() -> None:
    queue = [job("a0", "org_a", priority=500), job("b0", "org_b", priority=1)]
    shares = Standing(CAPACITY).set("org_a", history=50.0)
    assert _order(queue, node(1), shares) == ["b0"]
    # within one org, priority still orders
    queue = [job("b0", "org_b", priority=1, created=0), job("b1", "org_b", priority=9, created=5)]
    assert _order(queue, node(1), Standing(CAPACITY)) == ["b1"]


def test_an_org_whose_head_cannot_be_placed_lets_the_next_org_go() -> None:
    # org A has the lower share but wants a GPU the node lacks; its CPU job still runs
    queue = [job("a0", "org_a", gpus=1, created=0), job("a1", "org_a", created=1)]
    queue += [job("b0", "org_b", created=0)]
    shares = Standing(CAPACITY).set("org_b", history=100.0)
    result = plan_groups(JobQueue(queue), node(2), shares=shares)
    assert [a.job_id for a in result.assignments] == ["a1", "b0"]
    assert len(result.waiting) == 1


def test_one_org_plans_exactly_as_without_shares() -> None:
    queue = [job(f"a{i}", "org_a", created=i, priority=100 + i % 3) for i in range(6)]
    fleet = node(3)
    shares = Standing(CAPACITY).set("org_a", history=5.0)
    assert _order(queue, fleet, shares) == _order(queue, fleet, None)
