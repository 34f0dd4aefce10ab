"""A gang's orders (docs/jobs.md "Multi-node jobs"), for the job actor: one run order per
rank, each with its rank's environment, and the cancels that stop the ranks still on
their nodes when the attempt ends early (a rank failed, a node was lost, an order was not
taken)."""

from __future__ import annotations

from runplane.actors.job_deps import NodeLink
from runplane.agent import protocol as p
from runplane.jobs.phase import JobState

RANK_ENV = "RUNPLANE_RANK"
WORLD_SIZE_ENV = "RUNPLANE_WORLD_SIZE"
MASTER_ADDR_ENV = "RUNPLANE_MASTER_ADDR"
MASTER_PORT_ENV = "RUNPLANE_MASTER_PORT"


def rank_env(state: JobState, rank: int, master_addr: str) -> dict[str, str]:
    """What rank ``rank``'s process gets beside the job's environment: enough for
    ``torchrun --nnodes=$RUNPLANE_WORLD_SIZE --node_rank=$RUNPLANE_RANK
    --master_addr=$RUNPLANE_MASTER_ADDR --master_port=$RUNPLANE_MASTER_PORT``."""
    return {
        RANK_ENV: str(rank),
        WORLD_SIZE_ENV: str(len(state.ranks)),
        MASTER_ADDR_ENV: master_addr,
        MASTER_PORT_ENV: str(state.master_port or ""),
    }


def rank_order(base: p.Run, state: JobState, rank: int, master_addr: str) -> p.Run:
    """``base`` (the job's run order) for one rank; rank 0's also names the master port
    its agent checks it can listen on before it starts the process, and only rank 0
    collects the job's outputs (the ranks would write the same artifacts)."""
    spec = base.spec.model_copy(
        update={
            "env": {**base.spec.env, **rank_env(state, rank, master_addr)},
            "master_port": state.master_port if rank == 0 else None,
            "outputs": base.spec.outputs if rank == 0 else [],
        }
    )
    return base.model_copy(update={"spec": spec})


async def run_ranks(node: NodeLink, base: p.Run, state: JobState) -> str | None:
    """Deliver each rank its order, rank 0 first; the node of the first order not taken
    (None: all were). Rank 0's address is its agent's advertised one, else the address
    its connection came from (``Fleet.addresses``)."""
    master_addr = node.address(state.ranks[0].node_id) or ""
    for rank, held in enumerate(state.ranks):
        if not await node.deliver(held.node_id, rank_order(base, state, rank, master_addr)):
            return held.node_id
    return None


async def stop_ranks(node: NodeLink, job_id: str, before: JobState, after: JobState) -> None:
    """Tell the ranks of ``before``'s attempt that have not ended to stop (a lost node's
    cancel goes nowhere: its agent cancels what it no longer should run when it comes
    back)."""
    for rank, held in enumerate(before.ranks):
        ended = after.ranks[rank].phase.terminal if after.ranks else held.phase.terminal
        if not ended:
            await node.deliver(held.node_id, node.cancel_order(job_id, before.attempt))
