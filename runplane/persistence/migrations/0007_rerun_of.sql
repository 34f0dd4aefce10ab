-- 0007_rerun_of: the job a rerun was made from (POST /v1/jobs/{id}/rerun), NULL for a job
-- submitted afresh (and for every job created before this migration).
ALTER TABLE jobs ADD COLUMN rerun_of TEXT;
