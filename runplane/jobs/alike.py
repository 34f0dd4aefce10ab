"""What the jobs of one array share, worked out once (docs/jobs.md "Job arrays").

Most arrays are one body sent many times with each item's ``seed`` (or identical items):
their specs are copies of one planned spec (``JobArrays._plan``) that share every field
value but the seed. :class:`Alike` is one array's memo of what follows from those shared
values: the limits admission clamps them to, the placement demand, the ResolvedRun, and
the spec hash of the shared part, so that each item costs only its own delta (its seed:
hashed onto a copy of the shared part's SHA-256 state). A memo is keyed by the identity
of the values it read and keeps those values alive while the array is admitted, so an id
is never reused for another value meanwhile; values that are equal but not the same
objects merely miss the memo and are worked out again (the result is the same).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

from .jobspec import (
    HASHED_FIELDS,
    JobSpec,
    LimitsBody,
    canonical_json,
    hashed_subset,
)
from .jobspec import (
    spec_hash as hash_whole,
)

#: The spec fields a placement demand reads (``services.jobs._demand_key``).
DEMAND_FIELDS = (
    *("limits", "requires", "weights", "weights_preset", "isolation"),
    *("container", "pod", "preemptible", "preempt_grace_sec", "nodes"),
)
_DEMANDED = attrgetter(*DEMAND_FIELDS)
_UNSEEDED = attrgetter(*(f for f in HASHED_FIELDS if f != "seed"))
_STORED = attrgetter(*(f for f in JobSpec.model_fields if f != "seed"))
_RUN = attrgetter("limits", "command", "config")


def _ids(spec: JobSpec, fields: Callable[[JobSpec], tuple[Any, ...]]) -> tuple[int, ...]:
    """The identity of the values ``fields`` (an ``attrgetter``) reads from ``spec``."""
    return tuple(map(id, fields(spec)))


class Split:
    """The canonical JSON of mappings that differ only in the value of one ``key``, cut
    where that value goes: the text before it (and its SHA-256 state) made once, each
    mapping's text and hash its value and the text after. A mapping without the key (or
    with None) is one text for all."""

    def __init__(self, doc: Mapping[str, Any], key: str = "seed") -> None:
        self.present = doc.get(key) is not None
        if not self.present:
            self.head, self.tail = canonical_json(doc), ""
        else:
            token = json.dumps(f"{key}-{uuid.uuid4().hex}")  # a value nothing else in it has
            text = canonical_json({**doc, key: json.loads(token)})
            at = text.index(token)
            self.head, self.tail = text[:at], text[at + len(token) :]
        self.hashed = hashlib.sha256(self.head.encode())

    def text(self, value: Any) -> str:
        return f"{self.head}{canonical_json(value)}{self.tail}" if self.present else self.head

    def sha256(self, value: Any) -> str:
        digest = self.hashed.copy()
        if self.present:
            digest.update(f"{canonical_json(value)}{self.tail}".encode())
        return digest.hexdigest()


class Alike:
    """One array's memo (see the module's docstring); used by ``Jobs.admitted``."""

    def __init__(self) -> None:
        #: the values whose ids key the memos, held while the array is admitted
        self._held: list[Any] = []
        self._limits: dict[tuple[Any, ...], LimitsBody | None] = {}
        self._hashed: dict[tuple[Any, ...], Split] = {}
        self._stored: dict[tuple[Any, ...], Split] = {}
        self._seen: set[tuple[Any, ...]] = set()
        self._runs: dict[tuple[Any, ...], dict[str, Any]] = {}
        #: demands by the ids of what they read, and by their canonical asks
        self.demand_ids: dict[tuple[Any, ...], Any] = {}
        self.demands: dict[tuple[Any, ...], Any] = {}

    def hold(self, value: Any) -> None:
        self._held.append(value)

    def with_limits(self, spec: JobSpec, limits: Mapping[str, Any]) -> JobSpec:
        """``spec`` with the admitted ``limits`` as ``finish`` takes them: itself when the
        clamp changes nothing, else ``spec.with_limits(limits)``; the clamped LimitsBody
        made once per distinct limits asked and clamp."""
        key = (id(spec.limits), *sorted(limits.items()))
        admitted = self._limits.get(key)
        if admitted is None:
            self.hold(spec.limits)
            clamped = spec.with_limits(limits).limits
            admitted = self._limits[key] = None if clamped == spec.limits else clamped
        return spec if admitted is None else spec.model_copy(update={"limits": admitted})

    def spec_hash(self, spec: JobSpec) -> str:
        """``jobspec.spec_hash(spec)``, the shared part hashed once (from its second spec
        on: the first is hashed whole, so a sweep's items, all unlike, pay nothing more)."""
        key = (frozenset(spec.model_fields_set), spec.nodes, id(spec.pod), *_ids(spec, _UNSEEDED))
        split = self._hashed.get(key)
        if split is None:
            if self._first(key, spec):
                return hash_whole(spec)
            split = self._hashed[key] = Split(hashed_subset(spec))
        return split.sha256(spec.seed)

    def stored_json(self, spec: JobSpec) -> str:
        """``spec.stored_json()`` (the ``jobs.spec`` column), the shared part encoded once
        (from its second spec on, as ``spec_hash``)."""
        key = (frozenset(spec.model_fields_set), *_ids(spec, _STORED))
        split = self._stored.get(key)
        if split is None:
            if self._first(key, spec):
                return spec.stored_json()
            split = self._stored[key] = Split(spec.stored())
        return split.text(spec.seed)

    def _first(self, key: tuple[Any, ...], spec: JobSpec) -> bool:
        """Whether ``key`` is seen for the first time (then held)."""
        if key in self._seen:
            return False
        self._seen.add(key)
        self.hold(spec)
        return True

    def run(self, spec: JobSpec, make_run: Callable[[JobSpec], dict[str, Any]]) -> dict[str, Any]:
        """``make_run(spec)`` (the stored ResolvedRun: it does not read the seed), made
        once per maker and what a ResolvedRun reads (``runs.stored_run``)."""
        key = (id(make_run), spec.stack, *_ids(spec, _RUN))
        run = self._runs.get(key)
        if run is None:
            self.hold((make_run, spec))
            run = self._runs[key] = make_run(spec)
        return run

    def demand_key(self, spec: JobSpec, priority: int, org_id: str | None) -> tuple[Any, ...]:
        """The key of ``demand_ids``: what a demand reads, by identity."""
        return (priority, org_id, *_ids(spec, _DEMANDED))
