"""A node's placement shape, reliability and reputation, from its row."""

from __future__ import annotations

from runplane.placement import Gpu, NodeShape, Tier

from .enrollment import DEFAULT_ORG
from .repo import NodeRow


def reliability_of(row: NodeRow) -> float:
    """Share of the attempts placed on the node that it did not lose (1.0 with none yet)."""
    total = row.attempts_total
    return 1.0 if total == 0 else max(0.0, 1.0 - row.attempts_lost / total)


def reputation_of(row: NodeRow) -> float:
    """Laplace-smoothed share of the node's attempts that ended succeeded: (ok+1)/(total+2)."""
    return round((row.attempts_ok + 1) / (row.attempts_total + 2), 4)


def shape_of(row: NodeRow) -> NodeShape:
    f = row.facts
    return NodeShape(
        id=row.id,
        tier=Tier.parse(row.tier),
        disabled=row.disabled,
        cpu_cores=f.cpu_cores,
        ram_gb=f.ram_gb,
        disk_gb=f.disk_gb,
        gpus=tuple(
            Gpu(model=g.model, vendor=g.vendor, vram_gb=g.vram_gb, cuda=g.cuda) for g in f.gpus
        ),
        arch=f.arch,
        os=f.os,
        capabilities=f.capabilities,
        max_concurrency=f.max_concurrency,
        dlperf=f.dlperf,
        reliability=reliability_of(row),
        owner=owner_of(row.org_id),
        images=frozenset(f.images.digests) if f.images is not None else frozenset(),
    )


def owner_of(org_id: str) -> str | None:
    """The org that owns a node of ``org_id``: a node enrolled with a join token minted for
    an org is that org's; one of the default org (a token minted without ``org_id``, the
    local agent, open enrollment) is universal (None)."""
    return None if org_id == DEFAULT_ORG else org_id
