"""Job arrays (``POST /v1/jobs/batch``, docs/jobs.md "Job arrays"): the batch body, its
expansion into SubmitJobBody items (a list, or one body and a ``sweep`` grid of config
values), and the SQL of the ``job_arrays`` table (migration 0024).

An array is admitted and written in one transaction: every job or none. Its jobs are
ordinary jobs (their own ids, spec hashes, phases) that carry ``array_id`` and
``array_index``, so ``GET /v1/jobs?array=`` lists them and one cancel reaches them all.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from runplane.jobs.jobspec import canonical_json
from runplane.jobs.phase import TERMINAL
from runplane.jobs.spec import INT64_MAX, SubmitJobBody
from runplane.persistence import Store, Tx, from_json, to_json

#: Most jobs one batch may create (items, or the sweep's grid size).
MAX_BATCH = 1000
#: Most values one sweep key may list.
MAX_SWEEP_VALUES = 1000

SweepValues = Annotated[list[Any], Field(min_length=1, max_length=MAX_SWEEP_VALUES)]


class BatchBody(BaseModel):
    """Either ``jobs`` (1-1,000 SubmitJobBody items) or ``job`` plus a ``sweep``: config
    key -> values, expanded as a grid (every combination, the first key varying slowest),
    each combination laid over ``job.config``. ``atomic`` (default true): one invalid
    item refuses the whole batch; false: the valid items are created and the invalid ones
    listed by index."""

    model_config = ConfigDict(extra="forbid")

    jobs: Annotated[list[SubmitJobBody], Field(min_length=1, max_length=MAX_BATCH)] | None = None
    job: SubmitJobBody | None = None
    sweep: dict[Annotated[str, Field(min_length=1, max_length=256)], SweepValues] | None = None
    atomic: bool = True

    @model_validator(mode="after")
    def _one_shape(self) -> BatchBody:
        if (self.jobs is None) == (self.job is None):
            raise ValueError("send either `jobs` (a list) or `job` with a `sweep`, not both")
        if self.jobs is not None and self.sweep is not None:
            raise ValueError("`sweep` goes with `job`, not with `jobs`")
        if self.job is not None:
            if not self.sweep:
                raise ValueError("`job` needs a `sweep` of config values (or send `jobs`)")
            size = math.prod(len(v) for v in self.sweep.values())
            if size > MAX_BATCH:
                raise ValueError(
                    f"the sweep's grid has {size} combinations; at most {MAX_BATCH} per batch"
                )
        return self


@dataclass(frozen=True, slots=True)
class Item:
    """One job of a batch: its index in the array and the key prefix of its problems."""

    index: int
    body: SubmitJobBody
    prefix: str


def expand(batch: BatchBody) -> list[Item]:
    """The batch's jobs in array order."""
    if batch.jobs is not None:
        return [Item(i, body, f"jobs.{i}.") for i, body in enumerate(batch.jobs)]
    assert batch.job is not None and batch.sweep is not None
    keys = list(batch.sweep)
    base = batch.job
    items = []
    for i, combo in enumerate(itertools.product(*(batch.sweep[k] for k in keys))):
        config = {**base.config, **dict(zip(keys, combo, strict=True))}
        items.append(Item(i, base.model_copy(update={"config": config}), f"sweep.{i}."))
    return items


def fast_batch(data: Mapping[str, Any]) -> BatchBody | None:
    """A ``jobs`` batch (``data``, the decoded body) validated once per distinct item: each
    item but its ``seed`` is validated as a SubmitJobBody once for every item that sends the
    same, and each seed checked on its own (an integer in range; anything else is left in
    the item to validate). None when the body is of another shape or anything in it is
    wrong: the caller then validates the whole body, which names every fault exactly as
    before (a fast path only for bodies that validate)."""
    jobs, atomic = data.get("jobs"), data.get("atomic", True)
    if not data.keys() <= {"jobs", "atomic"} or type(atomic) is not bool:
        return None
    if not isinstance(jobs, list) or not 1 <= len(jobs) <= MAX_BATCH:
        return None
    seen: dict[str, SubmitJobBody] = {}
    bodies: list[SubmitJobBody] = []
    for raw in jobs:
        if not isinstance(raw, dict):
            return None
        seed = raw.get("seed")
        seeded = type(seed) is int and 0 <= seed <= INT64_MAX
        text = json.dumps({k: v for k, v in raw.items() if k != "seed"} if seeded else raw)
        body = seen.get(text)
        if body is None:
            try:
                body = seen[text] = SubmitJobBody.model_validate_json(text, strict=True)
            except ValidationError:
                return None
        bodies.append(body.model_copy(update={"seed": seed}) if seeded else body)
    fields = {"jobs", "atomic"} if "atomic" in data else {"jobs"}
    return BatchBody.model_construct(fields, jobs=bodies, atomic=atomic)


def shape(body: SubmitJobBody, *but: str) -> tuple[int, ...]:
    """What makes items of an array alike: the identity of each field value of ``body``
    but its ``seed`` (and the fields ``but`` names). Items that share their values (one
    parsed body copied with each item's seed, ``fast_batch``; a sweep's template copied
    with each item's config; a list's identical items) are of one shape and planned once;
    equal values that are not the same objects are merely planned apart. The bodies are
    held by the batch while it is planned, so an id is not reused meanwhile."""
    fields = _SHAPES.get(but)
    if fields is None:
        left_out = ("seed", *but)
        names = (name for name in SubmitJobBody.model_fields if name not in left_out)
        fields = _SHAPES[but] = attrgetter(*names)
    return tuple(map(id, fields(body)))


#: the getters of ``shape``, by the fields it leaves out besides the seed
_SHAPES: dict[tuple[str, ...], Callable[[SubmitJobBody], tuple[Any, ...]]] = {}


def batch_hash(batch: BatchBody) -> str:
    """Fingerprint of the whole request (an Idempotency-Key replay must send the same)."""
    asked = batch.model_dump(mode="json")
    return hashlib.sha256(canonical_json(asked).encode()).hexdigest()


# -- the job_arrays table -------------------------------------------------------------------

ARRAY_COLUMNS = "id, org_id, project, submitted_by, count, sweep, created_at"


@dataclass(frozen=True, slots=True)
class NewArray:
    id: str
    org_id: str
    project: str
    submitted_by: str
    count: int
    sweep: dict[str, list[Any]] | None
    idempotency_key: str | None = None
    idempotency_hash: str | None = None


def insert_array(tx: Tx, array: NewArray, now: int) -> None:
    tx.execute(
        "INSERT INTO job_arrays (id, org_id, project, submitted_by, count, sweep, "
        "idempotency_key, idempotency_hash, created_at) VALUES (?,?,?,?,?,?,?,?,?)",
        (
            array.id,
            array.org_id,
            array.project,
            array.submitted_by,
            array.count,
            to_json(array.sweep) if array.sweep is not None else None,
            array.idempotency_key,
            array.idempotency_hash,
            now,
        ),
    )


async def get_array(store: Store, array_id: str, org_id: str | None) -> dict[str, Any] | None:
    """The array's row (``sweep`` decoded), None when unknown or another org's."""
    row = await store.fetchone(f"SELECT {ARRAY_COLUMNS} FROM job_arrays WHERE id = ?", (array_id,))
    if row is None or (org_id is not None and row["org_id"] != org_id):
        return None
    return {**row, "sweep": from_json(row["sweep"]) if row["sweep"] else None}


async def phase_counts(store: Store, array_id: str) -> dict[str, int]:
    rows = await store.fetchall(
        "SELECT phase, COUNT(*) AS n FROM jobs WHERE array_id = ? GROUP BY phase", (array_id,)
    )
    return {str(r["phase"]): int(r["n"]) for r in rows}


async def live_ids(store: Store, array_id: str) -> list[str]:
    """The array's jobs that have not ended, in array order."""
    ended = ", ".join("?" * len(TERMINAL))
    rows = await store.fetchall(
        f"SELECT id FROM jobs WHERE array_id = ? AND phase NOT IN ({ended}) ORDER BY array_index",
        (array_id, *(p.value for p in TERMINAL)),
    )
    return [str(r["id"]) for r in rows]
