"""The three ways the fleet index walks a stream's eligible nodes in order (``index.py``
picks one by its cost estimate): a *scan* of the all-nodes shelves skipping ineligible
nodes, a heap *merge* of the selected shelves, or an *enumeration* of the feasible
classes' members, sorted. Each takes the first ``need`` that fit among the first
``budget`` eligible; a scan or merge gives up (None) past ``limit`` visits."""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field

from .filters import fits_all
from .model import JobDemand
from .shelves import ITEMS, Entry, FleetClass, Item, Shelf
from .weights import BINPACK, DLPERF, GPU_FIT, IMAGE_CACHED, RELIABILITY, SPREAD

#: The candidate streams of each scorer (the ``fit`` stream is always walked).
SCORER_STREAMS: dict[str, tuple[str, ...]] = {
    BINPACK: ("fit", "full"),
    SPREAD: ("roomy", "empty"),
    GPU_FIT: ("gpu_fit",),
    DLPERF: ("dlperf",),
    RELIABILITY: ("reliable",),
    IMAGE_CACHED: ("image_cached",),
}
#: The sorted list each stream walks (``gpu_fit``: ``fit``, best GPU shape first).
STREAM_LISTS: dict[str, str] = {
    "fit": "fit",
    "roomy": "roomy",
    "full": "full",
    "empty": "empty",
    "dlperf": "dlperf",
    "reliable": "reliable",
    "gpu_fit": "fit",
    "image_cached": "fit",
}
#: Streams that only visit nodes with enough free CPU (their list is entered at it).
RANGED_STREAMS = frozenset({"fit", "roomy", "gpu_fit", "image_cached"})


def streams_for(job: JobDemand) -> list[str]:
    """The streams a job walks: ``fit`` first, then those of its weighted scorers
    (``image_cached`` weighs only for a job with images: ``JobDemand.active_weights``)."""
    out = ["fit"]
    for name, _ in job.active_weights:
        for stream in SCORER_STREAMS[name]:
            if stream not in out:
                out.append(stream)
    return out


@dataclass(slots=True)
class Scope:
    """The shelves one walk may take from: ``shelves`` (selected by shape and free GPUs)
    holding ``size`` nodes, and ``members`` nodes in the feasible classes of ``classes``."""

    thresholds: dict[int, int]
    classes: tuple[int, ...]
    shelves: list[Shelf]
    size: int
    owners: tuple[str | None, ...]
    members: int = field(default=-1)
    scanned: list[Shelf] | None = None


def scan(
    entries: dict[str, Entry],
    items: Iterator[Item],
    stop: float | None,
    job: JobDemand,
    thresholds: dict[int, int],
    need: int,
    budget: int,
    limit: int,
) -> tuple[list[Entry], int] | None:
    """Walk the all-nodes shelf, skipping ineligible nodes; ``None`` past ``limit``."""
    out: list[Entry] = []
    visits = seen = 0
    for item in items:
        if stop is not None and item[0] > stop:
            break
        visits += 1
        if visits > limit:
            return None
        e = entries[item[-1]]
        threshold = thresholds.get(e.cid)
        if threshold is None or e.free_gpu < threshold:
            continue
        if seen >= budget:
            break
        seen += 1
        if fits_all(e, job):
            out.append(e)
            if len(out) >= need:
                break
    return out, seen


def merge(
    entries: dict[str, Entry],
    iters: list[Iterator[Item]],
    stop: float | None,
    job: JobDemand,
    thresholds: dict[int, int],
    need: int,
    budget: int,
    limit: int,
) -> tuple[list[Entry], int] | None:
    """Heap-merge the selected shelves (their nodes have enough free GPUs), skipping
    nodes of ineligible classes; ``None`` past ``limit`` visits."""
    heap: list[tuple[Item, int]] = []
    for idx, it in enumerate(iters):
        item = next(it, None)
        if item is not None and (stop is None or item[0] <= stop):
            heap.append((item, idx))
    heapq.heapify(heap)
    out: list[Entry] = []
    visits = seen = 0
    while heap:
        item, idx = heap[0]
        visits += 1
        if visits > limit:
            return None
        e = entries[item[-1]]
        if e.cid in thresholds:
            if seen >= budget:
                break
            seen += 1
            if fits_all(e, job):
                out.append(e)
                if len(out) >= need:
                    break
        nxt = next(iters[idx], None)
        if nxt is None or (stop is not None and nxt[0] > stop):
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (nxt, idx))
    return out, seen


def holders(
    entries: dict[str, Entry],
    nodes: set[str],
    job: JobDemand,
    thresholds: dict[int, int],
    need: int,
    budget: int,
) -> tuple[list[Entry], int]:
    """The ``image_cached`` stream: the eligible ``nodes`` (those whose cache holds one of
    the job's images) with enough free CPU, in ``fit`` order; the first ``need`` that fit
    among the first ``budget``. Costs O(h log h) for h holders (no sorted list per image:
    a node's load would move in every list of its images)."""
    eligible: list[Entry] = []
    for nid in nodes:
        e = entries[nid]
        threshold = thresholds.get(e.cid)
        if threshold is None or not e.walkable or e.free_gpu < threshold:
            continue
        if e.free_cpu >= job.cpu:
            eligible.append(e)
    eligible.sort(key=ITEMS["fit"])
    out: list[Entry] = []
    seen = 0
    for e in eligible:
        if seen >= budget:
            break
        seen += 1
        if fits_all(e, job):
            out.append(e)
            if len(out) >= need:
                break
    return out, seen


def enumerate_members(
    entries: dict[str, Entry],
    classes: dict[int, FleetClass],
    stream: str,
    job: JobDemand,
    scope: Scope,
    need: int,
    budget: int,
) -> tuple[list[Entry], int]:
    """Sort the eligible members of the scope's classes: cheap when they are few."""
    ranged = stream in RANGED_STREAMS
    eligible: list[Entry] = []
    for cid in scope.classes:
        threshold = scope.thresholds[cid]
        for nid in classes[cid].members:
            e = entries[nid]
            if not e.walkable or e.free_gpu < threshold:
                continue
            if ranged and e.free_cpu < job.cpu:
                continue
            eligible.append(e)
    eligible.sort(key=ITEMS[STREAM_LISTS[stream]])
    out: list[Entry] = []
    seen = 0
    for e in eligible:
        if seen >= budget:
            break
        seen += 1
        if fits_all(e, job):
            out.append(e)
            if len(out) >= need:
                break
    return out, seen
