"""Rows that are revoked, never deleted (access tokens, join tokens, node credentials):
the two statements every such table needs, written once.

Table and column names are the callers' constants, never user input.
"""

from __future__ import annotations

from runplane.persistence.store import Row, Store, Tx, now_ms


async def revoke(store: Store, table: str, key: str, value: str) -> tuple[bool, bool]:
    """Set ``revoked_at`` on the row where ``key = value`` unless already set.

    Returns ``(known, changed)``: whether the row exists, and whether this call revoked it
    (a second revocation keeps the first time)."""
    revoked_at = now_ms()

    def run(tx: Tx) -> tuple[bool, bool]:
        if tx.execute(
            f"UPDATE {table} SET revoked_at = ? WHERE {key} = ? AND revoked_at IS NULL",
            (revoked_at, value),
        ):
            return True, True
        return tx.fetchone(
            f"SELECT {key} FROM {table} WHERE {key} = ?", (value,)
        ) is not None, False

    return await store.transaction(run)


async def newest_first(store: Store, table: str, columns: str, org_id: str | None) -> list[Row]:
    """All rows (revoked ones included), newest first; only ``org_id``'s when given."""
    order = "ORDER BY created_at DESC, id DESC"
    if org_id is None:
        return await store.fetchall(f"SELECT {columns} FROM {table} {order}")
    return await store.fetchall(
        f"SELECT {columns} FROM {table} WHERE org_id = ? {order}", (org_id,)
    )


async def newest_page(
    store: Store, table: str, columns: str, org_id: str | None, *, limit: int, offset: int
) -> list[Row]:
    """A page of ``table`` newest first by id (ids sort by creation); only ``org_id``'s
    rows when given."""
    where, params = ("WHERE org_id = ? ", [org_id]) if org_id is not None else ("", [])
    return await store.fetchall(
        f"SELECT {columns} FROM {table} {where}ORDER BY id DESC LIMIT ? OFFSET ?",
        (*params, limit, offset),
    )
