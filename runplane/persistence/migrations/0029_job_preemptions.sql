-- 0029_job_preemptions: how often a job was preempted (docs/placement.md "Preemption"):
-- a running preemptible job stopped for a waiting job of higher priority goes back to the
-- queue without counting as a failure or as an infrastructure requeue (``attempts``).
ALTER TABLE jobs ADD COLUMN preemptions INTEGER NOT NULL DEFAULT 0;
