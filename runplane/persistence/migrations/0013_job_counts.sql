-- 0013_job_counts: job analytics rollup (GET /v1/analytics/jobs; docs/jobs.md#analytics).
-- Per org and per minute (unix ms // 60000): jobs submitted (by created_at) and jobs that
-- ended succeeded / failed (failed + timeout) / cancelled (by finished_at). Org '*' holds
-- every org's total. Kept in the same transaction as the job insert and its terminal
-- transition; filled from the jobs already stored when the server starts with it empty
-- (runplane/jobs/counts.py ``backfill``).
CREATE TABLE job_counts (
    org_id    TEXT NOT NULL,
    minute    BIGINT NOT NULL,
    submitted BIGINT NOT NULL DEFAULT 0,
    succeeded BIGINT NOT NULL DEFAULT 0,
    failed    BIGINT NOT NULL DEFAULT 0,
    cancelled BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, minute)
);

-- live jobs by org and phase (the analytics summary; quotas use the same shape)
CREATE INDEX jobs_org_phase ON jobs (org_id, phase);
