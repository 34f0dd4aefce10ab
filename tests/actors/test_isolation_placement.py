"""A job asking an isolation (gvisor, kata) runs only where a node's executor gives it
(#13 item 6): while no connected node reports the capability ``isolation-<kind>`` it waits
with a reason saying what it needs, and it is placed only on such a node (never on a plain
process-executor node beside it, however roomy). The actor tree runs in process on a real
store; agents are played by the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from runplane.actors import placement as pl
from runplane.jobs.spec import SubmitJobBody
from runplane.persistence import Store
from runplane.placement import isolation_capability
from runplane.system import Root
from tests.actors.harness import WHO, Agent, all_in, eventually, running_root, store

pytestmark = pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)

__all__ = ["store"]  # the fixture, imported


class SandboxNode(Agent):
    """A node whose executor reports ``capabilities`` (a container executor would)."""

    capabilities: tuple[str, ...] = ()


async def submit_isolated(root: Root, isolation: str) -> str:
    body = SubmitJobBody.model_validate(
        {"stack": "shell", "command": ["true"], "isolation": isolation}
    )
    return (await root.jobs.submit(body, WHO)).row.id


async def waits(root: Root, job_id: str) -> str | None:
    return (await root.placement.ask(pl.WaitReasons((job_id,)))).get(job_id)


async def test_an_isolation_no_node_gives_waits_with_the_reason(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        plain = Agent(root, agents, "node_plain", cpu=4)
        await plain.connect()
        job_id = await submit_isolated(root, "gvisor")

        async def reason() -> bool:
            return (await waits(root, job_id) or "").startswith("no node meets")

        await eventually(reason, "a wait reason")
        said = await waits(root, job_id)
        assert said == (
            "no node meets: capabilities isolation-gvisor (isolation gvisor: an agent "
            "started with --executor container on a machine where gVisor's runsc works; the "
            "process executor gives none) (1 node lacks them)"
        ), said
        assert job_id not in plain.runs
        # the plain node still takes a job that asks none
        other = await submit_isolated(root, "none")
        await eventually(lambda: all_in(plain.runs, [other]), "placed on the plain node")
        assert job_id not in plain.runs


async def test_an_isolated_job_goes_only_to_a_node_that_gives_it(
    store: Store, tmp_path: Path
) -> None:
    async with running_root(store, tmp_path) as (root, agents):
        plain = Agent(root, agents, "node_plain", cpu=64)  # the roomier node
        await plain.connect()
        sandbox = SandboxNode(root, agents, "node_sandbox", cpu=8)
        sandbox.capabilities = (isolation_capability("kata"),)
        await sandbox.connect()
        jobs = [await submit_isolated(root, "kata") for _ in range(3)]
        await eventually(lambda: all_in(sandbox.runs, jobs), "all on the sandbox node")
        assert not set(jobs) & set(plain.runs)
