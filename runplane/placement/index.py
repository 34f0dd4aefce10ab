"""The fleet index: finds the few nodes worth scoring without looking at every node.

Layout (see ``docs/placement.md``):

* **classes**: enabled nodes grouped by what the class-level filters read (tier, arch,
  capabilities, GPUs). Class filters run once per class per distinct job requirement
  (cached), never per node.
* **shelves**: the *walkable* nodes (enabled, a free job slot) grouped by GPU shape (arch
  and GPU models) and free GPU count, so a job needing ``g`` matching GPUs only looks at
  shelves of shapes that have them and with enough free; plus, per owner org (None:
  unowned nodes), one shelf of all its walkable nodes.
* **sorted lists** per shelf (:data:`ITEMS`): ``fit`` (free CPU, free RAM), ``roomy`` (the
  reverse), ``full`` / ``empty`` (current utilisation), ``dlperf``, ``reliable``; each item
  ends with the node id, so every order is total.

A decision walks *candidate streams* (:data:`SCORER_STREAMS`: ``fit`` always, plus those
of each scorer the job weights). A stream visits the *eligible* nodes (walkable, class
passes, enough free matching GPUs; for ``fit``/``roomy``/``gpu_fit`` also enough free CPU)
in its order and takes the first ``per_stream`` that also *fit* (CPU, RAM, disk). Every
stream but ``fit`` gives up after ``stream_budget * per_stream`` eligible nodes; ``fit`` never
does, so a job that fits anywhere is placed. The union is scored in full.

A stream is walked in one of three ways, all visiting the eligible nodes in the same
order (so the outcome is the one :func:`~runplane.placement.plan.reference_place` gets by
sorting every node): a *scan* of the all-nodes shelves of the owners whose nodes the job
may use (merged when several: its org's, the unowned, its granters'), skipping ineligible
nodes, a heap
*merge* of the selected shelves skipping nodes of ineligible classes, or an *enumeration*
of the feasible classes' members, sorted. A cost estimate picks the first to try; one
that visits far more nodes than estimated hands over to the next.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Literal

from . import walks
from .explain import EMPTY_FLEET, Placement, Unplaced, unplaced
from .filters import (
    CLASS_FILTERS,
    DISABLED,
    GPU_FREE,
    MOMENTARY_FITS,
    MOMENTARY_REASONS,
    NODE_FILTERS,
    OWNER,
    SLOTS_FULL,
    first_rejection,
    gpu_verdict,
)
from .model import JobDemand, NodeLoad, NodeShape
from .scoring import score_breakdown, score_gpu_fit
from .shelves import (
    Entry,
    FleetClass,
    Item,
    Shape,
    ShapeKey,
    Shelf,
    fit_items,
    hold,
    items_from,
)
from .verdicts import BaseVerdicts, ClassVerdict, Feasibility, Gathered, StaticBase
from .walks import STREAM_LISTS, Scope, streams_for
from .weights import GPU_FIT

#: Fitting nodes each candidate stream contributes.
DEFAULT_PER_STREAM = 12
#: Eligible nodes a (non-``fit``) stream visits per candidate it wants before giving up.
STREAM_BUDGET = 16
#: Estimated cost, in node visits, of entering one shelf in a merge.
SHELF_COST = 3.0
#: Estimated cost, in node visits, of enumerating one class member.
MEMBER_COST = 1.5
#: A walk visiting more than this many times its estimate hands over to the next way.
SLACK = 2.0
_NO_GPU_NEED = -(1 << 62)
_UNBOUNDED = 1 << 62
_ZERO = NodeLoad()
_CACHE_LIMIT = 512
#: Per-org verdicts kept (job kinds x orgs: an owned fleet of 100 orgs needs thousands).
_ORG_CACHE_LIMIT = 8192

Walk = Literal["auto", "scan", "merge", "enumerate"]


def _static_view(node: NodeShape) -> tuple[object, ...]:
    """What the static filters read of a node."""
    return (
        node.class_key,
        node.disabled,
        node.cpu_cores,
        node.ram_gb,
        node.disk_gb,
        node.max_concurrency,
    )


def _count_from(shelf: Shelf, cpu: float) -> int:
    """How many of the shelf's nodes have at least ``cpu`` free CPU cores."""
    fit = shelf.lists["fit"]
    return len(fit) - fit.bisect_left((cpu,))


def _limit(cost: float, need: int) -> int:
    return _UNBOUNDED if cost >= _UNBOUNDED else int(SLACK * cost) + need


@dataclass(frozen=True, slots=True)
class FleetStatistics:
    nodes: int
    disabled: int
    walkable: int  # enabled, with a free job slot
    classes: int
    shapes: int
    shelves: int


class FleetIndex:
    """The indexed fleet: node shapes and loads. Pure data structure; no I/O, no clock.

    ``per_stream``: fitting nodes each candidate stream contributes; ``stream_budget``:
    eligible visits per wanted candidate before a stream gives up (see the module doc).
    ``walk``: force one way of walking (tests); ``"auto"`` picks. Same outcome either way.
    """

    def __init__(
        self,
        nodes: Iterable[NodeShape | tuple[NodeShape, NodeLoad]] = (),
        *,
        per_stream: int = DEFAULT_PER_STREAM,
        stream_budget: int = STREAM_BUDGET,
        walk: Walk = "auto",
    ) -> None:
        if per_stream < 1:
            raise ValueError("per_stream must be >= 1")
        if stream_budget < 0:
            raise ValueError("stream_budget must be >= 0")
        self.per_stream = per_stream
        self.stream_budget = stream_budget
        self.walk: Walk = walk
        self._entries: dict[str, Entry] = {}
        self._classes: dict[int, FleetClass] = {}
        self._class_ids: dict[tuple[object, ...], int] = {}
        self._next_cid = 0
        self._shape_ids: dict[ShapeKey, Shape] = {}
        self._disabled: set[str] = set()
        #: image digest -> the nodes whose cache holds it (the ``image_cached`` stream)
        self._holders: dict[str, set[str]] = {}
        #: owner (None: unowned) -> a shelf of its walkable nodes: a scan walks the ones of
        #: the owners a job may use
        self._all: dict[str | None, Shelf] = {}
        self._shelves: dict[Shape, dict[int, Shelf]] = {}  # shape -> free GPUs -> shelf
        self._class_cache: dict[tuple[object, ...], Feasibility] = {}
        #: per class signature without the job's org: the classes the other class filters
        #: pass, as (class id, GPU threshold, shape, gpu_fit); the owner filter runs on it
        self._base_cache: dict[tuple[object, ...], BaseVerdicts] = {}
        self._static_cache: dict[tuple[object, ...], tuple[dict[str, int], tuple[str, ...]]] = {}
        #: per static signature without the job's org (what ``static_summary`` starts from)
        self._static_base_cache: dict[tuple[object, ...], StaticBase] = {}
        for item in nodes:
            if isinstance(item, NodeShape):
                self.upsert(item)
            else:
                self.upsert(item[0], item[1])

    # --- reading -----------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, node_id: object) -> bool:
        return node_id in self._entries

    def __iter__(self) -> Iterator[tuple[NodeShape, NodeLoad]]:
        for e in self._entries.values():
            yield e.node, e.load

    def node(self, node_id: str) -> NodeShape:
        return self._entries[node_id].node

    def load(self, node_id: str) -> NodeLoad:
        return self._entries[node_id].load

    def statistics(self) -> FleetStatistics:
        return FleetStatistics(
            nodes=len(self._entries),
            disabled=len(self._disabled),
            walkable=sum(len(shelf) for shelf in self._all.values()),
            classes=len(self._classes),
            shapes=len(self._shelves),
            shelves=sum(len(s) for s in self._shelves.values()),
        )

    # --- writing -----------------------------------------------------------------------

    def upsert(self, node: NodeShape, load: NodeLoad | None = None) -> None:
        """Add or replace a node; without ``load`` a known node keeps its load (a new one
        starts idle). O(log n), plus O(classes) when it creates or empties a class."""
        old = self._entries.get(node.id)
        if old is not None and old.node.images != node.images:
            if replace(old.node, images=node.images) == node:  # only its image cache changed
                hold(self._holders, old.node, False)
                hold(self._holders, node, True)
                self._entries[node.id] = Entry(node, old.load, old.cid)
            old = self._entries[node.id]
        if old is not None and old.node == node:
            if load is not None:
                self.update_load(node.id, load)
            return
        if old is not None:
            self._drop(old)
        self._insert(node, load if load is not None else old.load if old else _ZERO)
        if old is None or _static_view(old.node) != _static_view(node):
            self._static_cache.clear()  # not for a new dlperf or reliability
            self._static_base_cache.clear()

    def remove(self, node_id: str) -> bool:
        """Forget a node; False when unknown."""
        old = self._entries.get(node_id)
        if old is None:
            return False
        self._drop(old)
        self._static_cache.clear()
        self._static_base_cache.clear()
        return True

    def update_load(self, node_id: str, load: NodeLoad) -> None:
        """Replace a node's committed load (KeyError when unknown). O(log n)."""
        old = self._entries[node_id]
        if load == old.load:
            return
        new = Entry(old.node, load, old.cid)
        self._entries[node_id] = new
        if old.cid < 0:
            return
        cls = self._classes[old.cid]
        if old.walkable and new.walkable and old.free_gpu == new.free_gpu:
            if (old.free_cpu, old.free_ram, old.full) != (new.free_cpu, new.free_ram, new.full):
                self._shelves[cls.shape][old.free_gpu].move(old, new)
                self._all[cls.owner].move(old, new)
            return
        self._unshelve(cls, old)
        self._shelve(cls, new)

    def reserve(self, node_id: str, job: JobDemand) -> NodeLoad:
        """Add ``job``'s reservation to the node's load; returns the new load."""
        load = self._entries[node_id].load.plus(job.cpu, job.ram, job.gpus, 1, job.org_id)
        self.update_load(node_id, load)
        return load

    def release(self, node_id: str, job: JobDemand) -> NodeLoad:
        """Take ``job``'s reservation off the node's load (floored at zero)."""
        load = self._entries[node_id].load.plus(-job.cpu, -job.ram, -job.gpus, -1, job.org_id)
        self.update_load(node_id, load)
        return load

    def _insert(self, node: NodeShape, load: NodeLoad) -> None:
        hold(self._holders, node, True)
        if node.disabled:
            self._disabled.add(node.id)
            self._entries[node.id] = Entry(node, load, -1)
            return
        key = node.class_key
        cid = self._class_ids.get(key)
        if cid is None:
            cid = self._next_cid
            self._next_cid += 1
            shape = self._shape_ids.setdefault((node.arch, node.gpus), len(self._shape_ids))
            self._classes[cid] = FleetClass(cid, key, node, shape)
            self._class_ids[key] = cid
            self._class_cache.clear()
            self._base_cache.clear()
        cls = self._classes[cid]
        cls.members.add(node.id)
        new = Entry(node, load, cid)
        self._entries[node.id] = new
        self._shelve(cls, new)

    def _drop(self, e: Entry) -> None:
        nid = e.node.id
        del self._entries[nid]
        hold(self._holders, e.node, False)
        if e.cid < 0:
            self._disabled.discard(nid)
            return
        cls = self._classes[e.cid]
        self._unshelve(cls, e)
        cls.members.discard(nid)
        if not cls.members:
            del self._classes[e.cid]
            del self._class_ids[cls.key]
            self._class_cache.clear()
            self._base_cache.clear()

    def _shelve(self, cls: FleetClass, e: Entry) -> None:
        if not e.walkable:
            return
        by_free = self._shelves.get(cls.shape)
        if by_free is None:
            by_free = self._shelves[cls.shape] = {}
        shelf = by_free.get(e.free_gpu)
        if shelf is None:
            shelf = by_free[e.free_gpu] = Shelf()
        shelf.add(e)
        owned = self._all.get(cls.owner)
        if owned is None:
            owned = self._all[cls.owner] = Shelf()
        owned.add(e)
        cls.walkable += 1

    def _unshelve(self, cls: FleetClass, e: Entry) -> None:
        if not e.walkable:
            return
        by_free = self._shelves[cls.shape]
        shelf = by_free[e.free_gpu]
        shelf.discard(e)
        if not len(shelf):
            del by_free[e.free_gpu]
            if not by_free:
                del self._shelves[cls.shape]
        owned = self._all[cls.owner]
        owned.discard(e)
        if not len(owned):
            del self._all[cls.owner]
        cls.walkable -= 1

    # --- searching ---------------------------------------------------------------------

    def feasibility(self, job: JobDemand) -> Feasibility:
        """What the class filters say of ``job``'s class signature (cached until a class
        appears or disappears). Two levels: the classes every filter but ``owner`` passes,
        per signature without the job's org, indexed by owner and by grantee; then, per
        org, the universal ones, the org's own and those granted to it: an org seen for
        the first time costs a pass over its share of the feasible classes only."""
        sig = job.class_signature
        hit = self._class_cache.get(sig)
        if hit is not None:
            return hit
        base = self._base_feasible(job)
        org = job.org_id
        classes = self._classes

        def owner_of(cid: int) -> str | None:
            return classes[cid].owner

        if org is None:
            gathered = Gathered()
            gathered.add(base.every, owner_of)
        else:
            if base.universal_part is None:
                base.universal_part = Gathered()
                base.universal_part.add(base.universal, owner_of)
            gathered = base.universal_part.copy()
            gathered.add(base.by_owner.get(org, []), owner_of)
            gathered.add(base.by_grantee.get(org, []), owner_of)
        result = gathered.feasibility()
        if len(self._class_cache) >= _ORG_CACHE_LIMIT:
            self._class_cache.clear()
        self._class_cache[sig] = result
        return result

    def _base_feasible(self, job: JobDemand) -> BaseVerdicts:
        """The classes every class filter but ``owner`` passes for ``job`` (any org)."""
        key = job.class_signature[:-1]  # the signature's last item is the org
        hit = self._base_cache.get(key)
        if hit is not None:
            return hit
        anyone = job if job.org_id is None else replace(job, org_id=None)
        base = BaseVerdicts()
        for cid, cls in self._classes.items():
            rep = cls.rep
            rejection = first_rejection(rep, _ZERO, anyone, CLASS_FILTERS)
            if rejection is not None:
                base.rejected[cid] = rejection.reason
                continue
            if anyone.gpus:
                threshold = anyone.gpus + len(rep.gpus) - gpu_verdict(rep, anyone)[1]
            else:
                threshold = _NO_GPU_NEED
            base.add(rep, (cid, threshold, cls.shape, score_gpu_fit(rep, _ZERO, anyone)))
        if len(self._base_cache) >= _CACHE_LIMIT:
            self._base_cache.clear()
        self._base_cache[key] = base
        return base

    def candidates(self, job: JobDemand) -> list[tuple[NodeShape, NodeLoad]]:
        """The bounded candidate set a decision scores (empty: nothing fits now)."""
        return [(e.node, e.load) for e in self._candidates(job)]

    def best(self, job: JobDemand) -> Placement | None:
        """The best-scoring candidate (ties: lowest node id), or ``None``."""
        entries = self._candidates(job)
        if not entries:
            return None
        fits = self.feasibility(job).gpu_fit
        classes = self._classes
        best: tuple[float, str, tuple[tuple[str, float], ...]] | None = None
        for e in entries:
            known = {GPU_FIT: fits[classes[e.cid].shape]}
            total, parts = score_breakdown(e.node, e.load, job, known)
            nid = e.node.id
            if best is None or total > best[0] or (total == best[0] and nid < best[1]):
                best = (total, nid, parts)
        assert best is not None
        return Placement(best[1], best[0], best[2], len(entries))

    def _scope(self, feas: Feasibility, shapes: Iterable[Shape], whole: bool) -> Scope:
        classes: list[int] = []
        shelves: list[Shelf] = []
        size = 0
        for shape in shapes:
            classes.extend(feas.shape_classes[shape])
            by_free = self._shelves.get(shape)
            if by_free is None:
                continue
            threshold = feas.shapes[shape]
            for free, shelf in by_free.items():
                if free >= threshold:
                    shelves.append(shelf)
                    size += len(shelf)
        thresholds = feas.thresholds if whole else {cid: feas.thresholds[cid] for cid in classes}
        return Scope(thresholds, tuple(classes), shelves, size, feas.owners)

    def stream_takes(self, job: JobDemand) -> dict[str, list[str]]:
        """What each of ``job``'s streams takes, in order (node ids): for tests and for
        explaining a decision. A decision itself stops after ``fit`` when it takes fewer
        than ``per_stream`` nodes (then those are all the fitting nodes)."""
        return {
            stream: [e.node.id for e in found]
            for stream, found in self._takes(job, shortcut=False).items()
        }

    def _candidates(self, job: JobDemand) -> list[Entry]:
        chosen: dict[str, Entry] = {}
        for found in self._takes(job, shortcut=True).values():
            for e in found:
                chosen[e.node.id] = e
        return list(chosen.values())

    def _takes(self, job: JobDemand, *, shortcut: bool) -> dict[str, list[Entry]]:
        feas = self.feasibility(job)
        if not feas.thresholds:
            return {}
        scope = self._scope(feas, feas.shapes, whole=True)
        if scope.size == 0:
            return {}
        k = self.per_stream
        first, _ = self._walk("fit", job, scope, k, _UNBOUNDED)
        takes = {"fit": first}
        if shortcut and len(first) < k:
            return takes  # every fitting node: every other stream's take is among them
        budget = self.stream_budget * k
        for stream in streams_for(job)[1:]:
            if stream == "gpu_fit":
                takes[stream] = self._walk_gpu_fit(job, feas, k, budget)
            elif stream == "image_cached":
                way = {"scan": "scan", "merge": "sort", "enumerate": "sort"}.get(self.walk, "auto")
                takes[stream] = walks.cached(
                    self._entries,
                    self._scanned(scope),
                    self._holders,
                    job,
                    scope.thresholds,
                    k,
                    budget,
                    way,
                )
            else:
                takes[stream] = self._walk(stream, job, scope, k, budget)[0]
        return takes

    def _walk_gpu_fit(
        self, job: JobDemand, feas: Feasibility, need: int, budget: int
    ) -> list[Entry]:
        """The ``fit`` order within each group of shapes of equal ``gpu_fit``, best group
        first, sharing one budget."""
        out: list[Entry] = []
        for _, shapes in feas.groups:
            if len(out) >= need or budget <= 0:
                break
            scope = self._scope(feas, shapes, whole=False)
            if scope.size == 0:
                continue
            found, seen = self._walk("fit", job, scope, need - len(out), budget)
            out.extend(found)
            budget -= seen
        return out

    def _walk(
        self, stream: str, job: JobDemand, scope: Scope, need: int, budget: int
    ) -> tuple[list[Entry], int]:
        """``(the first need fitting nodes among the first budget eligible nodes of scope
        in the stream's order, eligible nodes visited)``."""
        name = STREAM_LISTS[stream]
        start: Item | None = None
        stop: float | None = None
        if name == "fit":
            start = (job.cpu,)
        elif name == "roomy":
            stop = -job.cpu
        # without a budget, a fit walk may jump over nodes short of RAM (``fit_items``)
        jump = name == "fit" and budget >= _UNBOUNDED and job.ram > 0

        def walk(shelf: Shelf) -> Iterator[Item]:
            if jump:
                return fit_items(shelf.lists["fit"], job.cpu, job.ram)
            return items_from(shelf.lists[name], start)

        ways = self._ways(name, job, scope, need, budget)
        for way, limit in ways:
            if way == "scan" and len(self._scanned(scope)) == 1:
                items = walk(self._scanned(scope)[0])
                got = walks.scan(
                    self._entries, items, stop, job, scope.thresholds, need, budget, limit
                )
            elif way != "enumerate":  # a merge, or a scan of several owners' nodes
                shelves = scope.shelves if way == "merge" else self._scanned(scope)
                iters = [walk(shelf) for shelf in shelves]
                got = walks.merge(
                    self._entries, iters, stop, job, scope.thresholds, need, budget, limit
                )
            else:
                got = walks.enumerate_members(
                    self._entries, self._classes, stream, job, scope, need, budget
                )
            if got is not None:
                return got
        raise AssertionError("enumeration always completes")

    def _ways(
        self, name: str, job: JobDemand, scope: Scope, need: int, budget: int
    ) -> list[tuple[str, int]]:
        """The ways to walk list ``name`` of ``scope``, cheapest estimate first, each with
        the visits after which it hands over to the next (``enumerate`` always completes)."""
        if self.walk != "auto":
            return [(self.walk, _UNBOUNDED)]
        wanted = need if budget >= _UNBOUNDED else min(budget, 2 * need)
        alls = self._scanned(scope)
        ranged = name in ("fit", "roomy")
        if len(alls) == 1:
            only = alls[0]
            in_range = _count_from(only, job.cpu) if ranged else len(only)
            scan = wanted * in_range / scope.size
        else:
            in_range = sum(_count_from(s, job.cpu) if ranged else len(s) for s in alls)
            scan = wanted * in_range / scope.size + SHELF_COST * (len(alls) - 1)
        merge = SHELF_COST * len(scope.shelves) + wanted
        if min(scan, merge) <= MEMBER_COST * len(scope.classes):
            enum = float(_UNBOUNDED)  # each class has a member: enumerating costs more
        else:
            if scope.members < 0:
                classes = self._classes
                scope.members = sum(len(classes[cid].members) for cid in scope.classes)
            enum = MEMBER_COST * scope.members
        if enum < min(scan, merge):
            ways = [("enumerate", _UNBOUNDED)]
        elif scan <= merge:
            ways = [("scan", int(SLACK * merge) + need), ("merge", _limit(enum, need))]
        else:
            ways = [("merge", _limit(enum, need))]
        ways.append(("enumerate", _UNBOUNDED))
        return ways

    def _scanned(self, scope: Scope) -> list[Shelf]:
        """What a scan walks: the all-nodes shelves of the owners of the scope's classes
        (one list in a fleet no org owns a node of; set on the scope once)."""
        if scope.scanned is None:
            alls = self._all
            if len(alls) == 1:
                scope.scanned = list(alls.values())
            else:
                scope.scanned = [alls[owner] for owner in scope.owners if owner in alls]
        return scope.scanned

    # --- explaining --------------------------------------------------------------------

    def static_summary(self, job: JobDemand) -> tuple[dict[str, int], tuple[str, ...]]:
        """``(static rejection counts, ids of nodes passing every static filter)``.

        From the org-independent verdicts (:meth:`_static_base`, per job static signature
        without the org): the unowned classes' summed once, then the owned classes the
        job's org may use (its own, granted to it) one by one; every other owned node is
        an ``owner`` rejection. Cached per static signature until a node is added,
        removed or reshaped.
        """
        sig = job.static_signature
        hit = self._static_cache.get(sig)
        if hit is not None:
            return hit
        base = self._static_base(job)
        counts = Counter(base.universal_counts)
        if self._disabled:
            counts[DISABLED] = len(self._disabled)
        matching = list(base.universal_matching)
        org = job.org_id
        if org is None:
            usable: Iterable[int] = base.owned
        else:
            usable = dict.fromkeys((*base.by_owner.get(org, ()), *base.by_grantee.get(org, ())))
        members = 0
        for cid in usable:
            verdict = base.owned[cid]
            counts.update(verdict.counts)
            matching.extend(verdict.matching)
            members += verdict.members
        if base.owned_members > members:  # the owner filter runs first
            counts[OWNER] += base.owned_members - members
        result = (dict(counts), tuple(matching))
        if len(self._static_cache) >= _ORG_CACHE_LIMIT:
            self._static_cache.clear()
        self._static_cache[sig] = result
        return result

    def _static_base(self, job: JobDemand) -> StaticBase:
        """Every static filter but ``owner``, for any org: class filters once per class,
        node filters once per member of a class they pass."""
        key = (job.class_signature[:-1], *job.static_signature[1:])
        hit = self._static_base_cache.get(key)
        if hit is not None:
            return hit
        anyone = job if job.org_id is None else replace(job, org_id=None)
        rejected = self._base_feasible(anyone).rejected
        entries = self._entries
        base = StaticBase()
        for cid, cls in self._classes.items():
            reason = rejected.get(cid)
            if reason is not None:
                verdict = ClassVerdict({reason: len(cls.members)}, [], len(cls.members))
            else:
                counts: Counter[str] = Counter()
                matching: list[str] = []
                for nid in cls.members:
                    rejection = first_rejection(entries[nid].node, _ZERO, anyone, NODE_FILTERS)
                    if rejection is None:
                        matching.append(nid)
                    else:
                        counts[rejection.reason] += 1
                verdict = ClassVerdict(counts, matching, len(cls.members))
            base.add(cls.rep, cid, verdict)
        if len(self._static_base_cache) >= _CACHE_LIMIT:
            self._static_base_cache.clear()
        self._static_base_cache[key] = base
        return base

    def unplaced(self, job: JobDemand, *, explain: bool = True) -> Unplaced:
        """Why ``job`` cannot be placed now (call when :meth:`candidates` is empty).

        ``explain=False`` skips the per-node momentary breakdown (O(matching nodes)): the
        outcome then counts only static rejections.
        """
        if not self._entries:
            return Unplaced(EMPTY_FLEET, True, {}, 0)
        static_counts, matching = self.static_summary(job)
        counts = Counter(static_counts)
        if matching and explain:
            counts.update(self._busy_counts(job, matching))
        return unplaced(counts, job, len(matching))

    def _busy_counts(self, job: JobDemand, matching: tuple[str, ...]) -> dict[str, int]:
        """The momentary filters over nodes that pass every static one: a node's first
        reason is ``slots_free``'s or ``gpu_free``'s (by where the index keeps it: off the
        walkable shelves, or with fewer free GPUs than its class's threshold), else the
        first momentary fit filter it fails (or none)."""
        thresholds = self.feasibility(job).thresholds
        entries = self._entries
        counts = dict.fromkeys(MOMENTARY_REASONS, 0)
        need_gpu = job.gpus
        for nid in matching:
            e = entries[nid]
            if not e.walkable:
                counts[SLOTS_FULL] += 1
            elif need_gpu and e.free_gpu < thresholds[e.cid]:
                counts[GPU_FREE] += 1
            else:
                for reason, fits in MOMENTARY_FITS:
                    if not fits(e, job):
                        counts[reason] += 1
                        break
        return counts
