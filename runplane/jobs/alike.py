"""What the jobs of one array share, worked out once (docs/jobs.md "Job arrays").

Most arrays are one body sent many times with each item's ``seed``, or one template with
each item's sweep ``config``: their specs are copies of one planned spec
(``JobArrays._plan``) that share every field value but those two. :class:`Alike` is one
array's memo of what follows from the shared values: the limits admission clamps them to,
the placement demand, the ResolvedRun, and the spec hash and stored text of the shared
part, so that each item costs only its own delta (its seed and config, hashed onto a copy
of the shared part's SHA-256 state). A memo is keyed by the identity of the values it read
and keeps those values alive while the array is admitted, so an id is never reused for
another value meanwhile; values that are equal but not the same objects merely miss the
memo and are worked out again (the result is the same).
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

from runplane.ids import new_id

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
#: what the specs of an array's items differ in (a sweep's config, each item's seed)
_DELTA = ("config", "seed")
_HASHED = attrgetter(*(f for f in HASHED_FIELDS if f not in _DELTA))
_STORED = attrgetter(*(f for f in JobSpec.model_fields if f not in _DELTA))
_RUN = attrgetter("limits", "command", "config")


def _ids(spec: JobSpec, fields: Callable[[JobSpec], tuple[Any, ...]]) -> tuple[int, ...]:
    """The identity of the values ``fields`` (an ``attrgetter``) reads from ``spec``."""
    return tuple(map(id, fields(spec)))


class Split:
    """The canonical JSON of mappings that differ only in the values of ``keys``, cut
    where those values go: the text before the first (and its SHA-256 state) and the
    texts between them made once; each mapping's text and hash its values (in JSON, as
    ``canonical_json`` writes them) between those. A key the mapping lacks (or holds None)
    is not cut: its value is part of the shared text."""

    def __init__(self, doc: Mapping[str, Any], keys: tuple[str, ...] = ("seed",)) -> None:
        # a value nothing else in the text has, per key cut
        tokens = {k: f"{k}-{uuid.uuid4().hex}" for k in keys if doc.get(k) is not None}
        text = canonical_json({**doc, **tokens})
        quoted = {k: json.dumps(t) for k, t in tokens.items()}
        cuts = sorted((text.index(q), k, len(q)) for k, q in quoted.items())
        self.keys = tuple(k for _, k, _ in cuts)
        pieces, at = [], 0
        for start, _, size in cuts:
            pieces.append(text[at:start])
            at = start + size
        pieces.append(text[at:])
        self.head, self.rest = pieces[0], pieces[1:]
        self.hashed = hashlib.sha256(self.head.encode())

    def _tail(self, values: Mapping[str, Any]) -> str:
        """The text after the head: each value cut and the text that follows it."""
        out: list[str] = []
        for key, after in zip(self.keys, self.rest, strict=True):
            out += (canonical_json(values[key]), after)
        return "".join(out)

    def text(self, values: Mapping[str, Any]) -> str:
        return self.head + self._tail(values)

    def sha256(self, values: Mapping[str, Any]) -> str:
        digest = self.hashed.copy()
        digest.update(self._tail(values).encode())
        return digest.hexdigest()


class SpecPart:
    """The stored text of one shape of an array's specs, cut around each one's config
    and seed (``job_spec_parts``, migration 0031): a spec's whole text is ``head`` + its
    config's JSON (when ``cuts_config``) + ``mid`` + its seed + ``tail``, as
    ``repo.SPEC`` puts it together when it reads a row."""

    def __init__(self, head: str, mid: str, tail: str, *, cuts_config: bool) -> None:
        self.id = new_id("jsp_")
        self.head, self.mid, self.tail = head, mid, tail
        self.cuts_config = cuts_config

    @classmethod
    def of(cls, split: Split) -> SpecPart:
        """The part of ``split`` (cut at the config and seed, or at the seed alone);
        :data:`NOT_CUT` when it is cut otherwise (a spec without a seed is never one)."""
        if split.keys == ("config", "seed"):
            return cls(split.head, split.rest[0], split.rest[1], cuts_config=True)
        if split.keys == ("seed",):
            return cls(split.head, "", split.rest[0], cuts_config=False)
        return NOT_CUT

    def whole(self, config_json: str, seed: int) -> str:
        """The whole stored text of the spec with this config JSON and seed."""
        return f"{self.head}{config_json}{self.mid}{seed}{self.tail}"


#: The part of a shape that is not cut at its seed: its specs are stored whole.
NOT_CUT = SpecPart("", "", "", cuts_config=False)


class Alike:
    """One array's memo (see the module's docstring); used by ``Jobs.admitted``."""

    def __init__(self) -> None:
        #: the values whose ids key the memos, held while the array is admitted
        self._held: list[Any] = []
        self._limits: dict[tuple[Any, ...], LimitsBody | None] = {}
        self._hashed: dict[tuple[Any, ...], Split] = {}
        self._parts: dict[tuple[Any, ...], SpecPart] = {}
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
        """``jobspec.spec_hash(spec)``, the shared part hashed once: specs alike but for
        their seed and config (an array's), from the second on (the first is hashed whole,
        so an array of unlike items pays nothing more)."""
        key = (frozenset(spec.model_fields_set), spec.nodes, id(spec.pod), *_ids(spec, _HASHED))
        split = self._hashed.get(key)
        if split is None:
            if self._first(key, spec):
                return hash_whole(spec)
            split = self._hashed[key] = Split(hashed_subset(spec), _DELTA)
        try:
            return split.sha256({"seed": spec.seed, "config": spec.config})
        except TypeError:  # a config value that is not JSON as it is (pydantic dumps it)
            return hash_whole(spec)

    def stored(self, spec: JobSpec) -> tuple[str, SpecPart | None]:
        """What the ``jobs`` row stores of ``spec``: ``spec.stored_json()`` whole (the
        first spec of its shape, or one whose delta is not JSON as it is), or, from the
        second on, the shape's :class:`SpecPart` (stored once) and the text of this
        spec's config in it ("" when the config is not cut)."""
        key = (frozenset(spec.model_fields_set), *_ids(spec, _STORED))
        part = self._parts.get(key)
        if part is None:
            if self._first(key, spec):
                return spec.stored_json(), None
            part = self._parts[key] = SpecPart.of(Split(spec.stored(), _DELTA))
        if part is NOT_CUT:
            return spec.stored_json(), None
        try:
            return (canonical_json(spec.config) if part.cuts_config else ""), part
        except TypeError:
            return spec.stored_json(), None

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
