-- 0020_org_secrets: named secrets of an org (runplane/vault.py, docs/secrets.md), referenced
-- from job env values as ${secrets.NAME}. value: sealed (AES-256-GCM, "<org>/<name>" as
-- associated data); never returned by the API.
CREATE TABLE org_secrets (
    org_id     TEXT NOT NULL,
    name       TEXT NOT NULL,
    value      TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_by TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, name)
);
