-- 0027_report_n: the number of the last agent report (job_logs, job_metric) stored for the
-- job's current attempt. An agent numbers its reports per attempt and resends the ones a
-- crashed server (or an HA leader killed) may not have stored; the welcome tells it where
-- to resume, and the job actor drops a report numbered at or below this one (docs/agent.md
-- "Reports across a server crash"). 0 at each new attempt.
ALTER TABLE jobs ADD COLUMN report_n BIGINT NOT NULL DEFAULT 0;
