"""Fair share in the placement actor, on a real store with the actor tree in process
(agents played by the test): usage follows assignments and releases, weights arrive from
the policy document, and a placement restart starts again from the jobs on nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from runplane.actors import placement as pl
from runplane.jobs.spec import SubmitJobBody
from runplane.persistence import Store
from runplane.placement.fairshare import ShareRow
from runplane.services.jobs import Submitter
from runplane.system import Root
from tests.actors.harness import (
    Agent,
    all_in,
    eventually,
    greater,
    restarts,
    running_root,
    store,
)

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

__all__ = ["store"]  # the fixture, imported

ALICE = Submitter("org_alpha", "usr_alice")
BOB = Submitter("org_beta", "usr_bob")


async def submit(root: Root, who: Submitter) -> str:
    body = SubmitJobBody.model_validate({"stack": "shell", "command": ["true"]})
    return (await root.jobs.submit(body, who)).row.id


async def shares(root: Root) -> dict[str, ShareRow]:
    return {r.org_id: r for r in await root.placement.ask(pl.Shares())}


async def test_usage_follows_jobs_and_a_restart_keeps_the_current_allocation(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        node = Agent(root, agents, "node_fair", cpu=8)
        node.capabilities = ("limits-best-effort", "shared-uid-ok")
        await node.connect()
        first, second = await submit(root, ALICE), await submit(root, ALICE)
        await eventually(lambda: all_in(node.runs, [first, second]), "alpha's jobs placed")
        await node.start(first)
        await trio.sleep(3)  # the history grows while they run (real time)
        rows = await shares(root)
        alpha = rows["org_alpha"]
        assert alpha.running_jobs == 2 and alpha.share == pytest.approx(2 / 8)
        # 3 s at a quarter of the CPUs (0.75 share-s) and one second's start charge (0.25)
        assert alpha.usage > 0.9
        await node.finish(first)
        await eventually(
            lambda: _running(root, "org_alpha", 1), "the finished job's usage released"
        )
        kept = (await shares(root))["org_alpha"]
        assert kept.share == pytest.approx(1 / 8) and kept.usage > 0.8  # the history stays

        # the weight comes from the policy document (the admin's PUT tells placement)
        await root.shares.weight_changed("org_beta", 4.0)
        assert (await root.shares.rows("org_beta"))[0].weight == 4.0

        # a restart: the job on the node is charged again, the history is gone
        before = root.supervisor.statistics().restarts
        await root.placement.tell(pl.Enqueue("job_poison", 0, None))  # type: ignore[arg-type]
        await eventually(lambda: greater(restarts(root), before), "placement restarted")
        after = (await shares(root))["org_alpha"]
        assert after.running_jobs == 1 and after.usage == pytest.approx(1 / 8, abs=0.01)


async def _running(root: Root, org: str, jobs: int) -> bool:
    row = (await shares(root)).get(org)
    return row is not None and row.running_jobs == jobs
