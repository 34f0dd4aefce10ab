-- 0030_job_ranks: a gang's ranks in its current (or last) attempt (docs/jobs.md
-- "Multi-node jobs"): JSON [{"rank", "node_id", "phase"}] (NULL for a plain job; rank 0's
-- node is also ``node_id``), and the port rank 0 listens on for the others.
ALTER TABLE jobs ADD COLUMN ranks TEXT;
ALTER TABLE jobs ADD COLUMN master_port INTEGER;
