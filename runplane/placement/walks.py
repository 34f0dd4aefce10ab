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
from .shelves import ITEMS, Entry, FleetClass, Item, Shelf, items_from
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
    """Heap-merge shelves, skipping ineligible nodes (of ineligible classes, or, on the
    all-nodes shelves of several owners, with too few free GPUs); ``None`` past
    ``limit`` visits. Cheaper per visit than :func:`scan` over ``heapq.merge``."""
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
        threshold = thresholds.get(e.cid)
        if threshold is not None and e.free_gpu >= threshold:
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


#: Estimated cost, in node visits, of sorting one holder of an image (``cached``).
HOLDER_COST = 1.5


def cached(
    entries: dict[str, Entry],
    shelves: list[Shelf],
    holders: dict[str, set[str]],
    job: JobDemand,
    thresholds: dict[int, int],
    need: int,
    budget: int,
    way: str = "auto",
) -> list[Entry]:
    """The ``image_cached`` stream: the eligible nodes whose cache holds one of the job's
    images (``holders``: digest -> nodes) with enough free CPU, in ``fit`` order; the first ``need``
    that fit among the first ``budget``. Few holders: sort them (O(h log h)); many (a
    fleet that all runs the team's image): scan the ``fit`` lists of ``shelves`` skipping
    the others, handing over to the sort past twice its estimate. ``way``: ``scan`` or
    ``sort`` forces one (tests); both give the same take."""
    held: set[str] = set()
    for digest in job.image_digests:
        held.update(holders.get(digest, ()))
    if not held:
        return []
    start = (job.cpu,)
    sort_cost = HOLDER_COST * len(held)
    if way != "sort":
        in_range = sum(len(s) - s.lists["fit"].bisect_left(start) for s in shelves)
        estimate = min(budget, 2 * need) * in_range / len(held)
        if way == "scan" or estimate < sort_cost:
            iters = [items_from(s.lists["fit"], start) for s in shelves]
            items = iters[0] if len(iters) == 1 else heapq.merge(*iters)
            limit = (1 << 62) if way == "scan" else int(2 * sort_cost) + need
            got = _scan_held(entries, items, held, job, thresholds, need, budget, limit)
            if got is not None:
                return got
    return _sort_held(entries, held, job, thresholds, need, budget)


def _scan_held(
    entries: dict[str, Entry],
    items: Iterator[Item],
    held: set[str],
    job: JobDemand,
    thresholds: dict[int, int],
    need: int,
    budget: int,
    limit: int,
) -> list[Entry] | None:
    """:func:`scan` of the ``fit`` order counting only the nodes of ``held`` (a separate
    walk: the host jobs' scan stays without the membership test)."""
    out: list[Entry] = []
    visits = seen = 0
    for item in items:
        visits += 1
        if visits > limit:
            return None
        nid = item[-1]
        if nid not in held:
            continue
        e = entries[nid]
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
    return out


def _sort_held(
    entries: dict[str, Entry],
    held: set[str],
    job: JobDemand,
    thresholds: dict[int, int],
    need: int,
    budget: int,
) -> list[Entry]:
    """Sort the eligible holders with enough free CPU by their ``fit`` item and take."""
    eligible: list[Entry] = []
    for nid in held:
        e = entries[nid]
        threshold = thresholds.get(e.cid)
        if threshold is None or not e.walkable or e.free_gpu < threshold:
            continue
        if e.free_cpu >= job.cpu:
            eligible.append(e)
    eligible.sort(key=ITEMS["fit"])
    out: list[Entry] = []
    for e in eligible[:budget]:
        if fits_all(e, job):
            out.append(e)
            if len(out) >= need:
                break
    return out


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
