-- 0009_job_gpus: the GPU devices (UUIDs, else indices) the node's agent assigned to the
-- job's current attempt, as a JSON array; NULL before it started and after a requeue.
ALTER TABLE jobs ADD COLUMN gpus TEXT;
