-- 0008_exit_code: how the process of the job ended, as its agent saw it: the exit code (NULL
-- when it was killed by a signal, or never started) and the name of the signal (SIGTERM and so on).
-- Recorded for every finish, including the late one that follows a cancel.
ALTER TABLE jobs ADD COLUMN exit_code BIGINT;
ALTER TABLE jobs ADD COLUMN signal TEXT;
