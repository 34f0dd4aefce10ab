-- 0025_retention: the retention janitor (runplane/actors/janitor.py; docs/operations.md
-- "Retention"). purged_at: when the janitor removed the finished job's log lines, metric
-- points, stream points and artifacts (its row, phase events and final metrics stay);
-- NULL until then. The index finds the oldest finished jobs not purged yet; partial, so a
-- submit (a live job) costs it nothing and a purged job leaves it.
ALTER TABLE jobs ADD COLUMN purged_at BIGINT;
CREATE INDEX jobs_retention ON jobs (finished_at)
    WHERE purged_at IS NULL AND finished_at IS NOT NULL;
