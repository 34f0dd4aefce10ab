"""Node overrides (``PATCH /v1/nodes/{id}``, Slurm's ``scontrol update node``): a name, the
disabled flag (a drain: the node takes no new job, its running jobs finish) and caps on
what the node offers placement: CPU cores, RAM GB and job slots, each at most what the
node reports. Stored in the node's row (``overrides``), so they hold across its agent
re-registering and a server restart; placement gets the new shape at once."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from runplane.persistence import Store, from_json
from runplane.problems import FieldProblem, Problem, not_found

from . import repo
from .facts import NodeFacts
from .shape import owner_of


class NodePatch(BaseModel):
    """Only the fields given change; a cap of 0 removes that cap."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, StringConstraints(min_length=1, max_length=128)] | None = None
    disabled: bool | None = None
    cpu_cap: Annotated[int, Field(ge=0)] | None = None
    ram_cap: Annotated[int, Field(ge=0)] | None = None
    max_concurrency: Annotated[int, Field(ge=0)] | None = None


def _too_big(field: str, value: int, most: float) -> Problem:
    message = f"{field} {value} is above what the node reports ({most:g})"
    return Problem(400, "out_of_range", message, [FieldProblem(field, "out_of_range", message)])


async def apply(
    store: Store, node_id: str, patch: NodePatch, *, org_id: str | None
) -> dict[str, Any]:
    """Patch the node and answer NodePatchResult (effective values). ``org_id``: the
    caller's org (None: the admin token); a node another org owns is a 404, a universal
    node (no owner) is the admin token's only (403)."""
    raw = await store.fetchone(
        "SELECT org_id, name, disabled, facts, overrides FROM nodes WHERE id = ?", (node_id,)
    )
    if raw is None:
        raise not_found("node")
    if org_id is not None:
        owner = owner_of(raw["org_id"])
        if owner is None:
            raise Problem(
                403,
                "forbidden",
                "this node belongs to no org (it runs every org's jobs): only the operator's"
                " admin token may change it",
            )
        if owner != org_id:
            raise not_found("node")
    reported = NodeFacts.parse(raw["facts"])
    overrides = dict(from_json(raw["overrides"]) or {})
    for field, most in (
        ("cpu_cap", reported.cpu_cores),
        ("ram_cap", reported.ram_gb),
        ("max_concurrency", reported.max_concurrency),
    ):
        value = getattr(patch, field)
        if value is None:
            continue
        if value > most:
            raise _too_big(field, value, most)
        if value == 0:
            overrides.pop(field, None)
        else:
            overrides[field] = value
    if patch.name is not None:
        overrides["name"] = patch.name  # kept over the name the agent reports
    name = patch.name if patch.name is not None else raw["name"]
    disabled = bool(raw["disabled"]) if patch.disabled is None else patch.disabled
    await repo.write_patch(store, node_id, name=name, disabled=disabled, overrides=overrides)
    row = await repo.get(store, node_id)
    assert row is not None
    return {
        "id": row.id,
        "name": row.name,
        "disabled": row.disabled,
        "cpu_cores": _num(row.facts.cpu_cores),
        "ram_gb": _num(row.facts.ram_gb),
        "max_concurrency": row.facts.max_concurrency,
    }


def _num(value: float) -> float | int:
    return int(value) if float(value).is_integer() else value
