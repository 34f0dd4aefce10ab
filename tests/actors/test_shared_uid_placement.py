"""A node whose jobs share one uid (a non-root agent, ``--run-as``) runs one org's jobs at
a time: one job could read another's environment there (issue 35, docs/executor.md "Jobs
that share one uid"). A node giving each job a uid of its own (``uid-per-job``), or one
whose operator allowed it (``shared-uid-ok``), mixes orgs. The actor tree runs in process
on a real store; agents are played by the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runplane.actors import placement as pl
from runplane.jobs.spec import SubmitJobBody
from runplane.persistence import Store
from runplane.services.jobs import Submitter
from runplane.system import Root
from tests.actors.harness import Agent, all_in, eventually, running_root, store

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

__all__ = ["store"]  # the fixture, imported

ALICE = Submitter("org_alpha", "usr_alice")
BOB = Submitter("org_beta", "usr_bob")
BUSY = (
    "waiting for free capacity: 1 node matches but is busy (1 node runs another org's jobs "
    "(one org at a time: its jobs share one uid))"
)


class Node(Agent):
    """A node reporting how it keeps its jobs apart (its ``capabilities``)."""


async def submit(root: Root, who: Submitter) -> str:
    body = SubmitJobBody.model_validate({"stack": "shell", "command": ["true"]})
    return (await root.jobs.submit(body, who)).row.id


async def waits(root: Root, job_id: str) -> str | None:
    return (await root.placement.ask(pl.WaitReasons((job_id,)))).get(job_id)


async def test_a_shared_uid_node_runs_one_org_at_a_time(store: Store, tmp_path: Path) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        node = Node(root, agents, "node_shared", cpu=8)
        await node.connect()
        alpha = await submit(root, ALICE)
        await eventually(lambda: all_in(node.runs, [alpha]), "alpha's job placed")
        beta = await submit(root, BOB)
        alpha2 = await submit(root, ALICE)  # the same org shares the node

        await eventually(lambda: all_in(node.runs, [alpha2]), "alpha's second job placed")

        async def told() -> bool:
            return await waits(root, beta) == BUSY

        await eventually(told, "beta's job told why it waits")
        assert beta not in node.runs
        await node.start(alpha)
        await node.finish(alpha)
        await node.start(alpha2)
        assert beta not in node.runs  # alpha still runs a job there
        await node.finish(alpha2)
        await eventually(lambda: all_in(node.runs, [beta]), "beta's job placed once alpha's ended")
        third = await submit(root, ALICE)

        async def alpha_waits() -> bool:
            return await waits(root, third) == BUSY

        await eventually(alpha_waits, "alpha's next job waits for beta's")


@pytest.mark.parametrize("capability", ["uid-per-job", "shared-uid-ok"])
async def test_a_node_that_keeps_jobs_apart_or_is_allowed_mixes_orgs(
    store: Store, tmp_path: Path, capability: str
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        node = Node(root, agents, "node_own_uids", cpu=8)
        node.capabilities = ("limits-best-effort", capability)
        await node.connect()
        alpha = await submit(root, ALICE)
        beta = await submit(root, BOB)
        await eventually(lambda: all_in(node.runs, [alpha, beta]), "both orgs' jobs placed")
