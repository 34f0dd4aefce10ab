-- 0001_init: migration bookkeeping and the generic key/value table.
--
-- Portable SQL (SQLite and PostgreSQL). The runner checks `schema_migrations`
-- before applying anything, so this first migration must create it.

CREATE TABLE IF NOT EXISTS schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at BIGINT NOT NULL      -- unix ms
);

-- Instance metadata and small operator maps (e.g. channel targets):
-- one row per key, value is TEXT (JSON where structured).
CREATE TABLE IF NOT EXISTS meta (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL,
    updated_at BIGINT NOT NULL      -- unix ms
);
