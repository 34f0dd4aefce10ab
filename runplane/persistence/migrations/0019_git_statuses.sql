-- 0019_git_statuses: commit statuses ride the webhook deliveries' durable retries
-- (docs/git.md#commit-statuses). kind: webhook | git_status; for git_status rows
-- endpoint_id is the git connection, event the status reported when the row was written
-- (pending, success, failure, error) and run the commit and the job.
ALTER TABLE webhook_deliveries ADD COLUMN kind TEXT NOT NULL DEFAULT 'webhook';
