-- 0022_schedules: cron and interval schedules (docs/schedules.md). A schedule fires its
-- job or pipeline body as its creator (created_by, credential, credential_id re-checked at
-- each fire). next_run_at: the due time of its next occurrence (unix ms; NULL suspended);
-- advanced together with the schedule_runs row of the occurrence fired, in one
-- transaction conditional on next_run_at still being the old value, so no occurrence
-- fires twice. body: JSON, secret-looking plain env values sealed.
CREATE TABLE schedules (
    id            TEXT PRIMARY KEY,
    org_id        TEXT NOT NULL,
    name          TEXT NOT NULL,
    cron          TEXT,
    every_sec     BIGINT,
    timezone      TEXT NOT NULL,
    anchor        BIGINT NOT NULL,
    kind          TEXT NOT NULL,
    body          TEXT NOT NULL,
    concurrency   TEXT NOT NULL,
    suspend       INTEGER NOT NULL DEFAULT 0,
    created_by    TEXT NOT NULL,
    credential    TEXT NOT NULL,
    credential_id TEXT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL,
    next_run_at   BIGINT,
    last_run_at   BIGINT,
    last_error    TEXT
);
CREATE INDEX schedules_org ON schedules (org_id, id);

-- one row per occurrence fired or skipped; (schedule_id, due_at) unique
CREATE TABLE schedule_runs (
    schedule_id TEXT NOT NULL,
    due_at      BIGINT NOT NULL,
    fired_at    BIGINT NOT NULL,
    outcome     TEXT NOT NULL,
    ref         TEXT,
    status      INTEGER,
    detail      TEXT,
    PRIMARY KEY (schedule_id, due_at)
);
