"""SQL for stored policy documents (the ``policies`` table). Portable."""

from __future__ import annotations

from runplane.persistence import Store, from_json, to_json
from runplane.policy.caps import PolicyDoc


async def load_all(store: Store) -> dict[str, PolicyDoc]:
    rows = await store.fetchall("SELECT org_id, doc, updated_at FROM policies")
    return {
        row["org_id"]: PolicyDoc.from_stored(
            row["org_id"], from_json(row["doc"]), row["updated_at"]
        )
        for row in rows
    }


async def save(store: Store, doc: PolicyDoc) -> None:
    """Replace the org's document; an empty one removes the row (no refinements)."""
    if doc.empty:
        await store.execute("DELETE FROM policies WHERE org_id = ?", (doc.org_id,))
        return
    await store.execute(
        "INSERT INTO policies (org_id, doc, updated_at) VALUES (?, ?, ?) "
        "ON CONFLICT (org_id) DO UPDATE SET doc = excluded.doc, updated_at = excluded.updated_at",
        (doc.org_id, to_json(doc.stored()), doc.updated_at or 0),
    )
