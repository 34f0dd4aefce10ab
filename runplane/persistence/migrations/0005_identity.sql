-- 0005_identity: access tokens, users, orgs, memberships, login tokens and sessions, and
-- the audit trail (see docs/auth.md).
--
-- Portable SQL (SQLite and PostgreSQL). Secrets are never stored: `secret_hash` is the
-- lowercase hex SHA-256 of the secret (`rpt_` access token, `rpl_` login token, `rps_`
-- session token). Times are unix ms. Rows are never deleted except memberships (a removed
-- member); revocation sets `revoked_at`.

CREATE TABLE access_tokens (
    id          TEXT PRIMARY KEY,               -- tok_...
    secret_hash TEXT NOT NULL UNIQUE,           -- sha256(rpt_...), hex
    kind        TEXT NOT NULL,                  -- user | service
    subject     TEXT NOT NULL,
    org_id      TEXT NOT NULL,
    name        TEXT NOT NULL DEFAULT '',
    role        TEXT NULL,                      -- owner | admin | member | viewer | NULL
    scopes      TEXT NOT NULL,                  -- JSON array of scope names
    created_at  BIGINT NOT NULL,
    revoked_at  BIGINT NULL
);
CREATE INDEX access_tokens_org_created ON access_tokens (org_id, created_at);

CREATE TABLE users (
    id         TEXT PRIMARY KEY,                -- usr_...
    email      TEXT NOT NULL UNIQUE,            -- lowercased
    name       TEXT NOT NULL,
    status     TEXT NOT NULL,                   -- active
    created_at BIGINT NOT NULL
);

CREATE TABLE orgs (
    id         TEXT PRIMARY KEY,                -- org_...
    kind       TEXT NOT NULL,                   -- personal | team
    name       TEXT NOT NULL,
    slug       TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL
);
-- The org of the open deploy (anonymous callers and the admin token create in it).
INSERT INTO orgs (id, kind, name, slug, created_at)
VALUES ('org_default', 'team', 'Default', 'default', 0);

CREATE TABLE org_members (
    org_id    TEXT NOT NULL,
    user_id   TEXT NOT NULL,
    role      TEXT NOT NULL,                    -- owner | admin | member | viewer
    joined_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, user_id)
);
CREATE INDEX org_members_user ON org_members (user_id);

CREATE TABLE login_tokens (
    id          TEXT PRIMARY KEY,               -- lgt_...
    secret_hash TEXT NOT NULL UNIQUE,           -- sha256(rpl_...), hex
    user_id     TEXT NOT NULL,
    org_id      TEXT NOT NULL,                  -- the org the session will act in
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    used_at     BIGINT NULL,                    -- single use
    revoked_at  BIGINT NULL
);
CREATE INDEX login_tokens_user ON login_tokens (user_id);

CREATE TABLE login_sessions (
    id             TEXT PRIMARY KEY,            -- lgs_...
    secret_hash    TEXT NOT NULL UNIQUE,        -- sha256(rps_...), hex
    user_id        TEXT NOT NULL,
    org_id         TEXT NOT NULL,
    login_token_id TEXT NOT NULL,
    created_at     BIGINT NOT NULL,
    expires_at     BIGINT NOT NULL,
    revoked_at     BIGINT NULL                  -- logout
);
CREATE INDEX login_sessions_user ON login_sessions (user_id);

-- Append-only: the application inserts rows and never updates or deletes them.
CREATE TABLE audit_log (
    id            TEXT PRIMARY KEY,             -- aud_... (sorts by time)
    org_id        TEXT NOT NULL,
    actor_type    TEXT NOT NULL,                -- user | service | node | system
    actor_id      TEXT NOT NULL,
    action        TEXT NOT NULL,                -- e.g. runs:submit, tokens:mint
    resource_type TEXT NOT NULL,
    resource_id   TEXT NOT NULL,
    after         TEXT NULL,                    -- JSON snapshot, secrets scrubbed
    ip            TEXT NULL,
    created_at    BIGINT NOT NULL
);
CREATE INDEX audit_log_org_created ON audit_log (org_id, created_at);
CREATE INDEX audit_log_created ON audit_log (created_at);
