-- 0018_git_connections: an org's connections to git repositories (runplane/git/,
-- docs/git.md). secret: the PAT or the deploy key's private half, sealed (AES-256-GCM,
-- the connection id as associated data), never shown again; ssh_pub: a generated deploy
-- key's public half. status: active | degraded (status_reason says why).
CREATE TABLE git_connections (
    id            TEXT PRIMARY KEY,
    org_id        TEXT NOT NULL,
    provider      TEXT NOT NULL,
    base_url      TEXT NOT NULL,
    repo_url      TEXT NOT NULL,
    auth_kind     TEXT NOT NULL,
    secret        TEXT NOT NULL,
    ssh_pub       TEXT NOT NULL DEFAULT '',
    label         TEXT NOT NULL DEFAULT '',
    default_ref   TEXT NOT NULL DEFAULT '',
    report_status INTEGER NOT NULL DEFAULT 1,
    status        TEXT NOT NULL,
    status_reason TEXT NOT NULL DEFAULT '',
    created_by    TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE INDEX git_connections_org ON git_connections (org_id);
