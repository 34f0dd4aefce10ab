"""Scorers: ``score(node, load, job) -> float`` in 0..1, higher is better.

Scorers only rank nodes that passed every filter. A job's score on a node is the weighted
mean of the scorers with a positive weight in its :attr:`JobDemand.weight_table`
(preset or default table, overridden and extended by its explicit ``weights``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from .filters import qualifying_vram
from .model import JobDemand, NodeLoad, NodeShape
from .weights import BINPACK, DLPERF, GPU_FIT, IMAGE_CACHED, RELIABILITY, SPREAD

Scorer = Callable[[NodeShape, NodeLoad, JobDemand], float]

#: ``dlperf`` at which the dlperf scorer gives 0.5 (it saturates towards 1 above).
DLPERF_HALF = 50.0
#: VRAM a GPU job "wants" when it names no ``min_vram_gb`` (for ``gpu_fit``).
GPU_FIT_REFERENCE_VRAM_GB = 16.0


def _clamp(x: float) -> float:
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


def fullness(node: NodeShape, load: NodeLoad) -> float:
    """Mean utilisation of cpu, ram, GPUs (nodes that have any) and job slots now, each
    clamped to 0..1: the index's tie-breaker between nodes of equal free CPU."""
    total = 0.0
    dims = 0
    if node.cpu_cores > 0:
        total += _clamp(load.used_cpu / node.cpu_cores)
        dims += 1
    if node.ram_gb > 0:
        total += _clamp(load.used_ram / node.ram_gb)
        dims += 1
    if node.gpus:
        total += _clamp(load.used_gpu / len(node.gpus))
        dims += 1
    if node.max_concurrency > 0:
        total += _clamp(load.active_jobs / node.max_concurrency)
        dims += 1
    return total / dims if dims else 0.0


def utilization_after(node: NodeShape, load: NodeLoad, job: JobDemand) -> float:
    """Mean utilisation of cpu, ram, GPUs (nodes that have any) and job slots once the job's
    reservation is added; each dimension clamped to 0..1."""
    total = 0.0
    dims = 0
    if node.cpu_cores > 0:
        total += _clamp((load.used_cpu + job.cpu) / node.cpu_cores)
        dims += 1
    if node.ram_gb > 0:
        total += _clamp((load.used_ram + job.ram) / node.ram_gb)
        dims += 1
    if node.gpus:
        total += _clamp((load.used_gpu + job.gpus) / len(node.gpus))
        dims += 1
    if node.max_concurrency > 0:
        total += _clamp((load.active_jobs + 1) / node.max_concurrency)
        dims += 1
    return total / dims if dims else 0.0


def score_binpack(node: NodeShape, load: NodeLoad, job: JobDemand) -> float:
    """Fuller is better (kube MostAllocated): keeps other nodes, big ones above all, free."""
    return utilization_after(node, load, job)


def score_spread(node: NodeShape, load: NodeLoad, job: JobDemand) -> float:
    """Emptier is better (kube LeastAllocated): the least loaded node answers fastest."""
    return 1.0 - utilization_after(node, load, job)


def score_gpu_fit(node: NodeShape, load: NodeLoad, job: JobDemand) -> float:
    """Do not waste GPUs. A CPU job scores 1 on a GPU-less node and 0 on a GPU node. A GPU
    job scores the mean of how much of the node's GPU count it takes and how close the VRAM
    of the GPUs it gets is to what it asked for (``min_vram_gb``, else 16 GB).

    Reads only the node's GPUs (never its load): one value per node class.
    """
    need = job.gpus
    if need == 0:
        return 0.0 if node.gpus else 1.0
    vram = qualifying_vram(node, job)
    if len(vram) < need:
        return 0.0
    got = vram[need - 1]
    want = job.requires.gpu.min_vram_gb or GPU_FIT_REFERENCE_VRAM_GB
    vram_fit = min(1.0, want / got) if got > 0 else 1.0
    return (vram_fit + need / len(node.gpus)) / 2.0


def score_dlperf(node: NodeShape, load: NodeLoad, job: JobDemand) -> float:
    """Faster hardware is better: ``dlperf / (dlperf + DLPERF_HALF)``."""
    d = max(0.0, node.dlperf)
    return d / (d + DLPERF_HALF)


def score_reliability(node: NodeShape, load: NodeLoad, job: JobDemand) -> float:
    """The node's track record (0..1)."""
    return _clamp(node.reliability)


def score_image_cached(node: NodeShape, load: NodeLoad, job: JobDemand) -> float:
    """The share of the job's image digests the node's cache holds (1: it starts without a
    pull; a job without images scores 1, though the weight is not active for it). Free
    cache space is not read: the agent evicts to make room."""
    digests = job.image_digests
    if not digests:
        return 1.0
    return len(digests & node.images) / len(digests)


SCORERS: Mapping[str, Scorer] = MappingProxyType(
    {
        BINPACK: score_binpack,
        SPREAD: score_spread,
        GPU_FIT: score_gpu_fit,
        DLPERF: score_dlperf,
        RELIABILITY: score_reliability,
        IMAGE_CACHED: score_image_cached,
    }
)


def score_breakdown(
    node: NodeShape,
    load: NodeLoad,
    job: JobDemand,
    known: Mapping[str, float] | None = None,
) -> tuple[float, tuple[tuple[str, float], ...]]:
    """``(combined score, ((scorer, value), ...))`` over the job's positive weights.

    The combined score is ``sum(w * s) / sum(w)``; 0 when every weight is 0. ``known``:
    scorer values already computed for this node (the index passes ``gpu_fit``, which it
    knows per GPU shape).
    """
    parts: list[tuple[str, float]] = []
    weight = total = 0.0
    util = -1.0
    for name, w in job.active_weights:
        if known is not None and name in known:
            value = known[name]
        elif name in (BINPACK, SPREAD):
            if util < 0.0:
                util = utilization_after(node, load, job)
            value = util if name == BINPACK else 1.0 - util
        else:
            value = SCORERS[name](node, load, job)
        parts.append((name, value))
        weight += w
        total += w * value
    return (total / weight if weight > 0 else 0.0), tuple(parts)


def score(node: NodeShape, load: NodeLoad, job: JobDemand) -> float:
    """The job's combined score on ``node`` (0..1)."""
    return score_breakdown(node, load, job)[0]
