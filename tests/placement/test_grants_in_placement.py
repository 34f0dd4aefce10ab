"""Grants in the placement actor's fleet: a grant adds its grantee to the matched nodes'
shapes (kind all, node, tier), a revocation or an expiry takes it away again at the next
scheduler tick, and an owned node without a grant refuses another org's job."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, cast

from runplane.actors.placement import GrantsChanged, PlacementActor
from runplane.nodes.grants import Grant, grantees
from runplane.persistence import Store, now_ms
from runplane.placement import OWNER, JobDemand, NodeLoad, NodeShape, Tier, first_rejection
from runplane.placement.filters import CLASS_FILTERS


def grant(kind: str = "all", **kw: Any) -> Grant:
    base = dict(
        id="ng_1",
        owner_org="org_a",
        grantee_org="org_b",
        kind=kind,
        node_id=None,
        tier=None,
        created_by="t",
        created_at=0,
        expires_at=None,
    )
    base.update(kw)
    return Grant(**base)  # type: ignore[arg-type]


def test_selectors_match_the_owners_nodes_only() -> None:
    assert grantees([grant()], "n1", "org_a", "community") == {"org_b"}
    assert grantees([grant()], "n1", "org_c", "community") == frozenset()
    assert grantees([grant()], "n1", None, "community") == frozenset()  # universal anyway
    by_node = grant("node", node_id="n2")
    assert grantees([by_node], "n1", "org_a", "partner") == frozenset()
    assert grantees([by_node], "n2", "org_a", "partner") == {"org_b"}
    by_tier = grant("tier", tier="trusted")
    assert grantees([by_tier], "n1", "org_a", "partner") == frozenset()
    assert grantees([by_tier], "n1", "org_a", "trusted") == {"org_b"}


def test_grants_change_the_fleet_and_expire_at_the_next_tick() -> None:
    async def assign(job_id: str, node_id: str) -> Any:
        raise AssertionError("no assignment here")

    actor = PlacementActor(store=cast(Store, None), assign=assign)
    node = NodeShape("n1", tier=Tier.PARTNER, owner="org_a", cpu_cores=4, ram_gb=8)
    actor._node_up(node)
    job_b = JobDemand("j", org_id="org_b")
    shape = actor.fleet.node("n1")
    assert first_rejection(shape, NodeLoad(), job_b, CLASS_FILTERS).reason == OWNER  # type: ignore[union-attr]
    actor._handle(GrantsChanged((grant(expires_at=now_ms() + 60_000),)))
    shape = actor.fleet.node("n1")
    assert shape.grantees == {"org_b"}
    assert first_rejection(shape, NodeLoad(), job_b, CLASS_FILTERS) is None
    # an expired grant stops matching when the next plan looks
    actor._set_grants((grant(expires_at=now_ms() - 1),))
    actor._expire_grants()
    assert actor.fleet.node("n1").grantees == frozenset() and actor.grants == ()
    # and a revocation (the grants without it) at once
    actor._handle(GrantsChanged((grant(),)))
    assert actor.fleet.node("n1").grantees == {"org_b"}
    actor._handle(GrantsChanged(()))
    assert actor.fleet.node("n1").grantees == frozenset()
    assert replace(node, grantees=frozenset({"org_b"})).class_key != node.class_key
