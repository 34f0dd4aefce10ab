-- 0024_job_arrays: job arrays (POST /v1/jobs/batch; docs/jobs.md "Job arrays"). One row
-- per accepted batch: its jobs carry array_id and their index in it. The batch's
-- Idempotency-Key lives here (a replay answers the same array), not on its jobs.
CREATE TABLE job_arrays (
    id               TEXT PRIMARY KEY,
    org_id           TEXT NOT NULL,
    project          TEXT NOT NULL,
    submitted_by     TEXT NOT NULL,
    count            INTEGER NOT NULL,
    sweep            TEXT,              -- JSON {key: [values]} of a sweep, else NULL
    idempotency_key  TEXT,
    idempotency_hash TEXT,
    created_at       BIGINT NOT NULL
);
CREATE UNIQUE INDEX job_arrays_idempotency ON job_arrays (org_id, idempotency_key);
ALTER TABLE jobs ADD COLUMN array_id TEXT;
ALTER TABLE jobs ADD COLUMN array_index INTEGER;
-- partial: a job outside an array costs the index nothing
CREATE INDEX jobs_array ON jobs (array_id, id) WHERE array_id IS NOT NULL;
