-- 0012_sessions: interactive sessions (docs/sessions.md). One row per session; its pod
-- runs as one mode=session job, which carries the session's id.
CREATE TABLE sessions (
    id             TEXT PRIMARY KEY,
    org_id         TEXT NOT NULL,
    project        TEXT NOT NULL,
    name           TEXT NOT NULL,
    submitted_by   TEXT NOT NULL,
    job_id         TEXT NOT NULL,
    phase          TEXT NOT NULL,
    idle_ttl_sec   INTEGER NOT NULL,
    -- [{name, stack, image, needs}] as the detail view shows them
    services       TEXT NOT NULL,
    actions        TEXT NOT NULL,
    teleop_stream  TEXT NOT NULL,
    error          TEXT,
    created_at     BIGINT NOT NULL,
    last_keepalive BIGINT NOT NULL,
    started_at     BIGINT,
    stopped_at     BIGINT,
    updated_at     BIGINT NOT NULL
);
CREATE INDEX sessions_org ON sessions (org_id, id);
CREATE INDEX sessions_phase ON sessions (phase);

ALTER TABLE jobs ADD COLUMN session_id TEXT;
