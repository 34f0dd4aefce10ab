"""What the class and static filters say of a job, as the fleet index caches it
(``index.py``): :class:`Feasibility` per job class signature, and the per-owner and
per-grantee verdicts behind it and behind the static wait reasons."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from .model import NodeShape
from .shelves import Shape


@dataclass(frozen=True, slots=True)
class Feasibility:
    """What the class filters say of a job class signature (cached per signature).

    ``thresholds``: feasible class id -> least free GPU count of an eligible node
    (``need + total - qualifying``: busy GPUs are assumed to be qualifying ones; very
    negative when the job needs none). ``shapes``: GPU shape -> its threshold, for shapes
    with a feasible class; ``gpu_fit``: the job's ``gpu_fit`` score on each (it reads only
    the GPUs). ``groups``: shapes by ``gpu_fit``, best first. ``owners``: the owners (None:
    unowned) of the feasible classes: the shelves worth walking.
    """

    thresholds: dict[int, int]
    shapes: dict[Shape, int]
    owners: tuple[str | None, ...]
    shape_classes: dict[Shape, tuple[int, ...]]
    gpu_fit: dict[Shape, float]
    groups: tuple[tuple[float, tuple[Shape, ...]], ...]


Found = tuple[int, int, Shape, float]  # class id, GPU threshold, shape, gpu_fit


@dataclass(slots=True)
class Gathered:
    """A :class:`Feasibility` being put together from :data:`Found` classes (``owners``
    of each class id from ``owner_of``). The unowned classes' part is gathered once per
    signature (:attr:`BaseVerdicts.universal_part`) and copied for each org, so an org
    seen for the first time costs a pass over its own and granted classes only."""

    thresholds: dict[int, int] = field(default_factory=dict)
    shapes: dict[Shape, int] = field(default_factory=dict)
    shape_classes: dict[Shape, list[int]] = field(default_factory=dict)
    fit_of: dict[Shape, float] = field(default_factory=dict)
    owners: dict[str | None, None] = field(default_factory=dict)

    def add(self, found: list[Found], owner_of: Callable[[int], str | None]) -> None:
        thresholds, shapes, fit_of = self.thresholds, self.shapes, self.fit_of
        shape_classes, owners = self.shape_classes, self.owners
        for cid, threshold, shape, fit in found:
            if cid in thresholds:  # owned by the org and granted to it too
                continue
            owners[owner_of(cid)] = None
            thresholds[cid] = threshold
            shapes[shape] = threshold  # equal for every class of a shape
            shape_classes.setdefault(shape, []).append(cid)
            fit_of[shape] = fit

    def copy(self) -> Gathered:
        return Gathered(
            dict(self.thresholds),
            dict(self.shapes),
            {shape: list(cids) for shape, cids in self.shape_classes.items()},
            dict(self.fit_of),
            dict(self.owners),
        )

    def feasibility(self) -> Feasibility:
        by_fit: dict[float, list[Shape]] = {}
        for shape, fit in self.fit_of.items():
            by_fit.setdefault(fit, []).append(shape)
        return Feasibility(
            thresholds=self.thresholds,
            shapes=self.shapes,
            owners=tuple(self.owners),
            shape_classes={shape: tuple(cids) for shape, cids in self.shape_classes.items()},
            gpu_fit=self.fit_of,
            groups=tuple(
                (fit, tuple(group)) for fit, group in sorted(by_fit.items(), key=lambda g: -g[0])
            ),
        )


@dataclass(slots=True)
class BaseVerdicts:
    """The classes a job signature passes (every class filter but ``owner``), by who may
    use them: ``universal`` (no owner), ``by_owner`` and ``by_grantee`` (an owned class is
    listed under its owner and under each of its grantees); ``every`` is all of them."""

    every: list[Found] = field(default_factory=list)
    universal: list[Found] = field(default_factory=list)
    by_owner: dict[str, list[Found]] = field(default_factory=dict)
    by_grantee: dict[str, list[Found]] = field(default_factory=dict)
    #: class id -> the first class filter but ``owner`` it fails (the reason any org gets)
    rejected: dict[int, str] = field(default_factory=dict)
    #: ``universal`` gathered (built on first use by an org's feasibility)
    universal_part: Gathered | None = None

    def add(self, rep: NodeShape, found: Found) -> None:
        self.every.append(found)
        if rep.owner is None:
            self.universal.append(found)
            return
        self.by_owner.setdefault(rep.owner, []).append(found)
        for grantee in rep.grantees:
            self.by_grantee.setdefault(grantee, []).append(found)


@dataclass(frozen=True, slots=True)
class ClassVerdict:
    """A class's static verdict for any org: rejection counts, the passing node ids."""

    counts: dict[str, int]
    matching: list[str]
    members: int


@dataclass(slots=True)
class StaticBase:
    """The static verdicts of every class for a job static signature without the org:
    the unowned classes' summed; the owned ones by class id, indexed by owner and by
    grantee (what each org may use); ``owned_members``: nodes in owned classes."""

    universal_counts: Counter[str] = field(default_factory=Counter)
    universal_matching: list[str] = field(default_factory=list)
    owned: dict[int, ClassVerdict] = field(default_factory=dict)
    by_owner: dict[str, list[int]] = field(default_factory=dict)
    by_grantee: dict[str, list[int]] = field(default_factory=dict)
    owned_members: int = 0

    def add(self, rep: NodeShape, cid: int, verdict: ClassVerdict) -> None:
        if rep.owner is None:
            self.universal_counts.update(verdict.counts)
            self.universal_matching.extend(verdict.matching)
            return
        self.owned[cid] = verdict
        self.owned_members += verdict.members
        self.by_owner.setdefault(rep.owner, []).append(cid)
        for grantee in rep.grantees:
            self.by_grantee.setdefault(grantee, []).append(cid)
