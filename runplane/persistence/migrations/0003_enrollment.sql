-- 0003_enrollment: node join tokens and node credentials (see docs/enrollment.md).
--
-- Portable SQL (SQLite and PostgreSQL). Secrets are never stored: `secret_hash` is the
-- lowercase hex SHA-256 of the secret (`rpj_...` join token, `rpn_...` node credential).
-- Times are unix ms, and `revoked_at` / `last_used_at` stay NULL until that happens.

CREATE TABLE join_tokens (
    id           TEXT PRIMARY KEY,              -- jt_...
    secret_hash  TEXT NOT NULL UNIQUE,          -- sha256(rpj_...), hex
    tier         TEXT NOT NULL,                 -- community | partner | trusted
    org_id       TEXT NOT NULL,                 -- org the enrolled nodes belong to
    label        TEXT NOT NULL DEFAULT '',
    created_at   BIGINT NOT NULL,
    revoked_at   BIGINT NULL,
    last_used_at BIGINT NULL                    -- last successful enrollment with it
);
CREATE INDEX join_tokens_org_created ON join_tokens (org_id, created_at);

CREATE TABLE node_credentials (
    node_id       TEXT PRIMARY KEY,             -- node_...
    secret_hash   TEXT NOT NULL UNIQUE,         -- sha256(rpn_...), hex
    join_token_id TEXT NULL,                    -- jt_... that enrolled it; NULL: open enrollment
    tier          TEXT NOT NULL,
    org_id        TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    revoked_at    BIGINT NULL
);
CREATE INDEX node_credentials_join_token ON node_credentials (join_token_id);
