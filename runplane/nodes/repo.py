"""SQL for the ``nodes`` table, and the node-side reads of ``jobs``. Portable (SQLite and
PostgreSQL). Rows come back as :class:`NodeRow`.

The owner of every write to ``nodes`` (docs/architecture.md, "Tables and their owners"):
no other module writes the table. Who decides the writes: the node actor (status, the
attempt counters, the agent's self-update reports, an update request it fulfils at a
hello, the image cache a heartbeat reports: ``facts.images``), the fleet service (the
row an agent's hello upserts, an operator's update request), the heartbeat log
(``last_heartbeat`` in batches), the patch of ``PATCH /v1/nodes/{id}``
(``runplane/nodes/patch.py``: name, disabled, overrides) and the start-up (every node
offline)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runplane.jobs.jobspec import JobSpec
from runplane.jobs.phase import ON_NODE, Phase
from runplane.jobs.repo import SPEC, SPEC_PARTS
from runplane.jobs.rows import rank_nodes
from runplane.nodes.status import AttemptOutcome, NodeStatus
from runplane.persistence import Store, from_json, now_ms, to_json

from .facts import NodeFacts
from .update import UpdateState

_ON_NODE = tuple(ph.value for ph in ON_NODE)
_ON_NODE_MARKS = ",".join("?" * len(_ON_NODE))


@dataclass(frozen=True, slots=True)
class NodeRow:
    id: str
    org_id: str
    name: str
    tier: str
    facts: NodeFacts
    disabled: bool
    agent_version: str
    channel: str
    status: str  # online | draining | disconnected | offline
    attempts_total: int
    attempts_lost: int
    attempts_ok: int
    last_heartbeat: int | None  # unix ms
    created_at: int
    updated_at: int
    update: UpdateState

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> NodeRow:
        return cls(
            id=row["id"],
            org_id=row["org_id"],
            # a name set with PATCH wins over the one the agent reports at each hello
            name=_overridden_name(row.get("overrides")) or row["name"],
            tier=row["tier"],
            facts=NodeFacts.parse(row["facts"], row["overrides"]),
            disabled=bool(row["disabled"]),
            agent_version=row["agent_version"],
            channel=row["channel"],
            status=row["status"],
            attempts_total=row["attempts_total"] or 0,
            attempts_lost=row["attempts_lost"] or 0,
            attempts_ok=row["attempts_ok"] or 0,
            last_heartbeat=row["last_heartbeat"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
            update=UpdateState.of(row),
        )


def _overridden_name(overrides: Any) -> str | None:
    decoded = from_json(overrides) if isinstance(overrides, str) and overrides else overrides
    name = decoded.get("name") if isinstance(decoded, dict) else None
    return name if isinstance(name, str) and name else None


@dataclass(frozen=True, slots=True)
class Attached:
    """What an agent's hello writes into its node's row."""

    node_id: str
    org_id: str
    tier: str
    name: str
    facts: dict[str, Any]
    agent_version: str
    channel: str
    auto_update: bool = False


async def get(store: Store, node_id: str) -> NodeRow | None:
    row = await store.fetchone("SELECT * FROM nodes WHERE id = ?", (node_id,))
    return None if row is None else NodeRow.of(row)


async def page(
    store: Store, *, after: str | None = None, limit: int | None = None
) -> list[NodeRow]:
    sql, params = "SELECT * FROM nodes", list[Any]()
    if after is not None:
        sql += " WHERE id > ?"
        params.append(after)
    sql += " ORDER BY id"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    return [NodeRow.of(r) for r in await store.fetchall(sql, params)]


async def upsert_attached(store: Store, node: Attached) -> None:
    """The node is online now (insert on first enrollment; name, facts, version refreshed)."""
    now = now_ms()
    await store.execute(
        "INSERT INTO nodes (id, org_id, name, tier, facts, agent_version, channel, auto_update,"
        " status, last_heartbeat, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
        " ON CONFLICT (id) DO UPDATE SET name = excluded.name, facts = excluded.facts,"
        " agent_version = excluded.agent_version, channel = excluded.channel,"
        " auto_update = excluded.auto_update, last_heartbeat = excluded.last_heartbeat,"
        " updated_at = excluded.updated_at",
        (
            node.node_id,
            node.org_id,
            node.name,
            node.tier,
            to_json(node.facts),
            node.agent_version,
            node.channel,
            int(node.auto_update),
            NodeStatus.ONLINE.value,
            now,
            now,
            now,
        ),
    )


async def set_status(
    store: Store, node_id: str, status: NodeStatus, last_beat_ms: int | None
) -> None:
    """Written at once, with the last beat when known (a node never attached keeps its
    row's beat)."""
    await store.execute(
        "UPDATE nodes SET status = ?, updated_at = ?,"
        " last_heartbeat = COALESCE(?, last_heartbeat) WHERE id = ?",
        (status, now_ms(), last_beat_ms, node_id),
    )


async def set_images(store: Store, node_id: str, images: Mapping[str, Any]) -> bool:
    """A container node's image cache as its heartbeat reported it (``facts.images``;
    the agent sends it only when it changed, the node actor writes only a change): the
    rest of the facts stay as its hello wrote them. False when the node has no row."""
    row = await store.fetchone("SELECT facts FROM nodes WHERE id = ?", (node_id,))
    if row is None:
        return False
    facts = row["facts"]
    facts = dict((from_json(facts) if isinstance(facts, str) else facts) or {})
    facts["images"] = dict(images)
    await store.execute(
        "UPDATE nodes SET facts = ?, updated_at = ? WHERE id = ?",
        (to_json(facts), now_ms(), node_id),
    )
    return True


async def mark_all_offline(store: Store) -> None:
    await store.execute("UPDATE nodes SET status = 'offline' WHERE status <> 'offline'")


async def connected_ids(store: Store) -> list[str]:
    """The nodes placement may use: online (connected and ready). A disconnected node is
    not (its agent may be back within the grace period, and is then placed on again);
    a draining one stops, an offline one is gone."""
    rows = await store.fetchall("SELECT id FROM nodes WHERE status = 'online'")
    return [r["id"] for r in rows]


_OUTCOME_COLUMN = {
    AttemptOutcome.PLACED: "attempts_total",
    AttemptOutcome.LOST: "attempts_lost",
    AttemptOutcome.OK: "attempts_ok",
}


async def count_outcome(store: Store, node_id: str, outcome: AttemptOutcome) -> None:
    """One more attempt ``placed`` on, ``lost`` with, or finished ``ok`` by the node."""
    column = _OUTCOME_COLUMN[outcome]
    await store.execute(f"UPDATE nodes SET {column} = {column} + 1 WHERE id = ?", (node_id,))


_BEAT_SQL = "UPDATE nodes SET last_heartbeat = ? WHERE id = ?"


async def write_beats(store: Store, beats: Mapping[str, int]) -> None:
    """Every node's latest beat (node id -> unix ms) in one batch."""
    await store.execute_many(_BEAT_SQL, [(at_ms, node_id) for node_id, at_ms in beats.items()])


async def write_patch(
    store: Store, node_id: str, *, name: str, disabled: bool, overrides: Mapping[str, Any]
) -> None:
    """An operator's ``PATCH /v1/nodes/{id}`` (``runplane/nodes/patch.py``)."""
    await store.execute(
        "UPDATE nodes SET name = ?, disabled = ?, overrides = ?, updated_at = ? WHERE id = ?",
        (name, 1 if disabled else 0, to_json(dict(overrides)), now_ms(), node_id),
    )


async def request_update(store: Store, node_id: str, target: str) -> None:
    """Remember that ``node_id`` is to run ``target`` ('' none; durable before it is
    sent: ``runplane/nodes/update.py``)."""
    await store.execute(
        "UPDATE nodes SET update_target = ?, updated_at = ? WHERE id = ?",
        (target, now_ms(), node_id),
    )


async def clear_update_request(store: Store, node_id: str, requested: str) -> None:
    """An agent of version ``requested`` said hello: the request is done (unless another
    replaced it meanwhile)."""
    await store.execute(
        "UPDATE nodes SET update_target = '', updated_at = ? WHERE id = ? AND update_target = ?",
        (now_ms(), node_id, requested),
    )


async def record_update_status(
    store: Store, node_id: str, version: str, phase: str, error: str | None
) -> None:
    """The agent's ``update_status`` report."""
    await store.execute(
        "UPDATE nodes SET update_version = ?, update_phase = ?, update_error = ?,"
        " updated_at = ? WHERE id = ? ",
        (version, phase, error or "", now_ms(), node_id),
    )


# jobs on nodes ---------------------------------------------------------------------------


async def expected_attempts(store: Store, node_id: str) -> dict[str, int]:
    """The attempts the server believes run on ``node_id``: job id -> attempt (a gang's
    too when one of its ranks runs there: its ``ranks`` JSON names the node)."""
    rows = await store.fetchall(
        f"SELECT id, attempt FROM jobs WHERE (node_id = ? OR ranks LIKE ? ESCAPE '!') "
        f"AND phase IN ({_ON_NODE_MARKS})",
        (node_id, f'%"node_id":{_like(to_json(node_id))},%', *_ON_NODE),
    )
    return {r["id"]: r["attempt"] for r in rows}


def _like(text: str) -> str:
    """``text`` matched literally in a LIKE pattern (escape character ``!``)."""
    return text.replace("!", "!!").replace("%", "!%").replace("_", "!_")


async def nodes_with_live_jobs(store: Store) -> list[str]:
    rows = await store.fetchall(
        f"SELECT DISTINCT node_id, ranks FROM jobs WHERE node_id IS NOT NULL AND phase IN "
        f"({_ON_NODE_MARKS})",
        _ON_NODE,
    )
    found = dict.fromkeys(r["node_id"] for r in rows)
    for r in rows:  # a gang's other ranks' nodes too
        found.update(dict.fromkeys(rank_nodes(r["ranks"]) if r["ranks"] else ()))
    return list(found)


@dataclass(frozen=True, slots=True)
class NodeJob:
    """A live job on a node: the columns of its ``jobs`` row a node view shows."""

    id: str
    org_id: str
    stack: str
    phase: Phase
    priority: int
    spec: JobSpec  # the node view sums the jobs' demands
    #: the GPU devices its agent assigned (empty until it reported them)
    gpus: tuple[str, ...] = ()

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> NodeJob:
        return cls(
            id=row["id"],
            org_id=row["org_id"],
            stack=row["stack"],
            phase=Phase(row["phase"]),
            priority=row["priority"],
            spec=JobSpec.load(row["spec"]),
            gpus=tuple(from_json(row["gpus"]) or ()) if row.get("gpus") else (),
        )


async def jobs_on(store: Store, node_ids: Sequence[str]) -> dict[str, list[NodeJob]]:
    """The live jobs on each of ``node_ids`` (the columns a node view shows), oldest first."""
    if not node_ids:
        return {}
    marks = ",".join("?" * len(node_ids))
    rows = await store.fetchall(
        f"SELECT id, org_id, stack, phase, node_id, priority, {SPEC}, gpus FROM jobs{SPEC_PARTS}"
        f" WHERE node_id IN ({marks}) AND phase IN ({_ON_NODE_MARKS}) ORDER BY id",
        (*node_ids, *_ON_NODE),
    )
    by_node: dict[str, list[NodeJob]] = {}
    for row in rows:
        by_node.setdefault(row["node_id"], []).append(NodeJob.of(row))
    return by_node
