"""What the fleet index is made of (``index.py``): one :class:`Entry` per node (its shape,
load and derived free capacity), the :class:`Shelf` of sorted lists over walkable nodes
(:data:`ITEMS`), and the :class:`FleetClass` of nodes the class filters judge alike."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from sortedcontainers import SortedList

from .model import Gpu, NodeLoad, NodeShape
from .scoring import fullness

Item = tuple[Any, ...]  # a sorted-list item: the sort key, node id last

ShapeKey = tuple[str, tuple[Gpu, ...]]  # (arch, GPUs): what decides GPU eligibility
Shape = int  # a fleet-local id of a ShapeKey (hashing Gpu tuples on every decision is slow)


class Entry:
    """One node's shape and load plus derived values. Never mutated once built (a load
    change builds a new entry)."""

    __slots__ = ("cid", "free_cpu", "free_gpu", "free_ram", "full", "load", "node", "walkable")

    def __init__(self, node: NodeShape, load: NodeLoad, cid: int) -> None:
        self.node = node
        self.load = load
        self.cid = cid
        self.free_cpu = node.cpu_cores - load.used_cpu
        self.free_ram = node.ram_gb - load.used_ram
        self.free_gpu = len(node.gpus) - load.used_gpu
        self.full = fullness(node, load)
        self.walkable = cid >= 0 and load.active_jobs < node.max_concurrency


def _item_fit(e: Entry) -> Item:
    return (e.free_cpu, e.free_ram, e.node.id)


def _item_roomy(e: Entry) -> Item:
    return (-e.free_cpu, -e.free_ram, e.node.id)


def _item_full(e: Entry) -> Item:
    return (-e.full, e.node.id)


def _item_empty(e: Entry) -> Item:
    return (e.full, e.node.id)


def _item_dlperf(e: Entry) -> Item:
    return (-e.node.dlperf, e.node.id)


def _item_reliable(e: Entry) -> Item:
    return (-e.node.reliability, e.node.id)


#: Each sorted list and its item (the sort key, node id last).
ITEMS: dict[str, Callable[[Entry], Item]] = {
    "fit": _item_fit,
    "roomy": _item_roomy,
    "full": _item_full,
    "empty": _item_empty,
    "dlperf": _item_dlperf,
    "reliable": _item_reliable,
}
LOAD_LISTS = ("fit", "roomy", "full", "empty")


def items_from(lst: SortedList[Item], start: Item | None) -> Iterator[Item]:
    """The items ``>= start`` (all when ``None``: a plain iteration, much cheaper to start
    than ``irange``), ascending. Do not change the list meanwhile."""
    return iter(lst) if start is None else lst.irange(start)


#: A ``fit`` walk meeting a run of nodes short of RAM jumps over it (one bisection) when
#: it is longer than this; shorter runs are walked (each node is skipped as unfit).
JUMP_OVER = 8


def fit_items(lst: SortedList[Item], cpu: float, ram: float) -> Iterator[Item]:
    """The ``fit`` list's items from ``(cpu, ram)`` on, ascending, less most of those
    short of ``ram`` GB free: within one free CPU count the list is sorted by free RAM,
    so on meeting a node with less than ``ram`` free the walk bisects to the first of
    that CPU count with enough and jumps there when that skips more than
    :data:`JUMP_OVER` nodes. Every node it leaves out fails the job's RAM fit, so a walk
    taking the first fitting nodes takes the same ones (a walk counting the nodes it
    visits does not: use it only without a budget). Do not change the list meanwhile."""
    at = lst.bisect_left((cpu, ram))
    short_until = at  # the items before it are known: walked without bisecting again
    while True:
        for item in lst.islice(at):
            if item[1] < ram and at >= short_until:
                short_until = lst.bisect_left((item[0], ram))
                if short_until > at + JUMP_OVER:
                    at = short_until
                    break
            at += 1
            yield item
        else:
            return


def entry(node: NodeShape, load: NodeLoad) -> Entry:
    """A detached entry, to compute sort items outside a fleet (the reference)."""
    return Entry(node, load, 0)


def hold(holders: dict[str, set[str]], node: NodeShape, held: bool) -> None:
    """Add (``held``) or remove ``node`` under each digest its image cache holds (the
    index's map digest -> nodes, which the ``image_cached`` stream walks)."""
    for digest in node.images:
        if held:
            holders.setdefault(digest, set()).add(node.id)
        else:
            nodes = holders[digest]
            nodes.discard(node.id)
            if not nodes:
                del holders[digest]


class Shelf:
    """The sorted lists (:data:`ITEMS`) over a set of walkable nodes."""

    __slots__ = ("lists",)

    def __init__(self) -> None:
        self.lists: dict[str, SortedList[Item]] = {name: SortedList() for name in ITEMS}

    def __len__(self) -> int:
        return len(self.lists["fit"])

    def add(self, e: Entry) -> None:
        for name, item in ITEMS.items():
            self.lists[name].add(item(e))

    def discard(self, e: Entry) -> None:
        for name, item in ITEMS.items():
            self.lists[name].remove(item(e))

    def move(self, old: Entry, new: Entry) -> None:
        """Re-sort a node whose load changed (the static lists stay)."""
        for name in LOAD_LISTS:
            item = ITEMS[name]
            lst = self.lists[name]
            lst.remove(item(old))
            lst.add(item(new))


class FleetClass:
    __slots__ = ("cid", "key", "members", "owner", "rep", "shape", "walkable")

    def __init__(self, cid: int, key: tuple[object, ...], rep: NodeShape, shape: Shape) -> None:
        self.cid = cid
        self.key = key
        self.rep = rep  # any member: class filters read only class attributes
        self.shape = shape
        self.owner = rep.owner
        self.members: set[str] = set()
        self.walkable = 0
