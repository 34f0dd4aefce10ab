"""Placement outcomes and the sentences that explain why a job waits, from what each
filter's :class:`~runplane.placement.filters.Reason` declares.

A static explanation names the unmet requirements, grouped, each with how many nodes fail
it: ``no node meets: 2 GPUs with >= 24 GB VRAM (40 nodes have smaller GPUs, 3 nodes have
no GPU), arch arm64 (12 nodes have another arch)``. A momentary one says how many nodes
match and what keeps them busy: ``waiting for free capacity: 3 nodes match but are busy
(2 nodes have no free job slot, 1 node has less than 4 GB RAM free)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from . import filters as f
from .model import JobDemand

EMPTY_FLEET = "no nodes in the fleet"


@dataclass(frozen=True, slots=True)
class Placement:
    """The job goes to ``node_id``. ``breakdown`` is each weighted scorer's value there;
    ``considered`` the number of candidate nodes that were scored."""

    node_id: str
    score: float
    breakdown: tuple[tuple[str, float], ...] = ()
    considered: int = 0


@dataclass(frozen=True, slots=True)
class Unplaced:
    """The job waits. ``static``: no node of the fleet could ever run it as the fleet is
    (only a fleet change helps); otherwise ``matching`` nodes could, but are busy now.
    ``counts``: nodes per rejection reason (each node counted once, at its first reason)."""

    reason: str
    static: bool
    counts: Mapping[str, int] = field(default_factory=dict)
    matching: int = 0


def _nodes(n: int, phrase: tuple[str, str]) -> str:
    return f"1 node {phrase[0]}" if n == 1 else f"{n} nodes {phrase[1]}"


def requirement(reason: str, job: JobDemand) -> str:
    """The job's requirement that a static ``reason`` says a node fails."""
    need = f.REASON_OF[reason].need
    if need is None:
        raise ValueError(f"not a static reason: {reason!r}")
    return need(job)


def busy_phrase(reason: str, job: JobDemand) -> tuple[str, str]:
    """(singular, plural) predicate for a momentary ``reason``."""
    busy = f.REASON_OF[reason].busy
    if busy is None:
        raise ValueError(f"not a momentary reason: {reason!r}")
    return busy(job)


def _ordered(counts: Mapping[str, int], reasons: frozenset[str]) -> list[tuple[str, int]]:
    order = {r: i for i, r in enumerate(f.REASONS)}
    return sorted(
        ((r, n) for r, n in counts.items() if r in reasons and n > 0),
        key=lambda rn: (-rn[1], order.get(rn[0], len(order))),
    )


def explain_static(counts: Mapping[str, int], job: JobDemand) -> str:
    """``no node meets: <requirement> (<n nodes fail it how>), ...``, biggest group first."""
    groups: dict[str, list[str]] = {}
    for reason, n in _ordered(counts, f.STATIC_REASONS):
        groups.setdefault(requirement(reason, job), []).append(_nodes(n, f.REASON_OF[reason].nodes))
    if not groups:
        return EMPTY_FLEET
    return "no node meets: " + ", ".join(
        f"{need} ({', '.join(parts)})" for need, parts in groups.items()
    )


def explain_busy(counts: Mapping[str, int], job: JobDemand, matching: int) -> str:
    """``waiting for free capacity: N nodes match but are busy (<why>, ...)``."""
    busy = "1 node matches but is busy" if matching == 1 else f"{matching} nodes match but are busy"
    head = "waiting for free capacity: " + busy
    parts = [_nodes(n, busy_phrase(r, job)) for r, n in _ordered(counts, f.MOMENTARY_REASONS)]
    return head + (f" ({', '.join(parts)})" if parts else "")


def unplaced(counts: Mapping[str, int], job: JobDemand, matching: int) -> Unplaced:
    """The :class:`Unplaced` outcome for rejection ``counts`` with ``matching`` nodes
    passing every static filter."""
    counts = {r: counts[r] for r in f.REASONS if counts.get(r)}
    if matching == 0:
        return Unplaced(explain_static(counts, job), True, counts, 0)
    return Unplaced(explain_busy(counts, job, matching), False, counts, matching)


def explain(counts: Mapping[str, int], job: JobDemand) -> str:
    """One sentence for rejection ``counts`` (static when no node failed only momentarily)."""
    busy = sum(n for r, n in counts.items() if r in f.MOMENTARY_REASONS)
    return unplaced(counts, job, busy).reason
