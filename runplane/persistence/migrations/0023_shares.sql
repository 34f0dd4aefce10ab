-- 0023_shares: share links and embed grants of a job (docs/sharing.md). The credential
-- itself is a signed token naming its row; the row says whether it still holds (revoked
-- or expired: refused, fail closed). Nothing secret is stored.
CREATE TABLE job_shares (
    id          TEXT PRIMARY KEY,
    kind        TEXT NOT NULL,          -- share | embed
    job_id      TEXT NOT NULL,
    org_id      TEXT NOT NULL,
    allow       TEXT NOT NULL,          -- JSON list of categories ([] = all)
    branding    TEXT,                   -- JSON {title, logo_url, accent} (embed)
    created_by  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT NOT NULL,
    revoked_at  BIGINT
);
CREATE INDEX job_shares_job ON job_shares (job_id);
