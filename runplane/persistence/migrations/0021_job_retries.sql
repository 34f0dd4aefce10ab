-- 0021_job_retries: user-level retry policies (SubmitJobBody.retry; docs/jobs.md "Retries").
-- retries: the retries made so far (distinct from attempts, the infra requeues).
-- retry_at: while the job waits out a retry's backoff, when it goes back to placement's
-- queue (unix ms); NULL otherwise. tries: JSON list of the outcomes of the tries that were
-- retried (try, attempt, node_id, phase, error, exit_code, signal, started_at, finished_at).
ALTER TABLE jobs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN retry_at BIGINT;
ALTER TABLE jobs ADD COLUMN tries TEXT;

-- Pipeline retries (POST /v1/pipelines/{id}/retry; docs/pipelines.md "Retry"): a retry
-- re-runs the stages that did not succeed, each as a new job. stage_retry numbers the
-- retry that launched a stage job (0: the first run), so a stage has at most one job per
-- retry and a rebuild adopts only the jobs of its stages' current retry.
ALTER TABLE jobs ADD COLUMN stage_retry INTEGER NOT NULL DEFAULT 0;
DROP INDEX jobs_pipeline_stage;
CREATE UNIQUE INDEX jobs_pipeline_stage ON jobs (pipeline_run_id, stage, stage_retry);
ALTER TABLE pipeline_stages ADD COLUMN retry INTEGER NOT NULL DEFAULT 0;
ALTER TABLE pipeline_runs ADD COLUMN retries INTEGER NOT NULL DEFAULT 0;
