-- 0002_jobs_nodes: jobs, their telemetry events, and fleet nodes.
--
-- Portable SQL (SQLite and PostgreSQL). Times are unix ms (BIGINT); structured values are
-- JSON in TEXT columns.

CREATE TABLE jobs (
    id               TEXT PRIMARY KEY,          -- job_<sortable>: keyset order = age
    org_id           TEXT NOT NULL,
    project          TEXT NOT NULL DEFAULT '',
    submitted_by     TEXT NOT NULL DEFAULT '',
    stack            TEXT NOT NULL,
    image            TEXT NOT NULL DEFAULT '',
    phase            TEXT NOT NULL,
    priority         INTEGER NOT NULL,
    mode             TEXT NOT NULL,
    seed             BIGINT NOT NULL,
    spec_hash        TEXT NOT NULL,
    spec             TEXT NOT NULL,             -- resolved spec (what runs); views redact
    node_id          TEXT,
    attempt          INTEGER NOT NULL DEFAULT 0, -- current attempt number (fencing)
    attempts         INTEGER NOT NULL DEFAULT 0, -- infra requeues
    error            TEXT,
    wait_reason      TEXT,
    final_metrics    TEXT NOT NULL DEFAULT '{}',
    artifacts        TEXT NOT NULL DEFAULT '[]',
    event_seq        BIGINT NOT NULL DEFAULT 0,  -- last telemetry seq written
    log_lines        BIGINT NOT NULL DEFAULT 0,  -- log lines kept (capped)
    log_dropped      BIGINT NOT NULL DEFAULT 0,  -- log lines past the cap
    idempotency_key  TEXT,
    idempotency_hash TEXT,
    created_at       BIGINT NOT NULL,
    started_at       BIGINT,
    finished_at      BIGINT,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX jobs_org_id ON jobs (org_id, id);
CREATE INDEX jobs_phase ON jobs (phase, id);
CREATE INDEX jobs_spec_hash ON jobs (spec_hash);
CREATE INDEX jobs_node ON jobs (node_id);
CREATE UNIQUE INDEX jobs_idempotency ON jobs (org_id, idempotency_key);

-- One row per SSE event of a job: kind log | metric | phase; data is the SSEEvent JSON.
CREATE TABLE job_events (
    job_id TEXT NOT NULL,
    seq    BIGINT NOT NULL,
    kind   TEXT NOT NULL,
    ts     BIGINT NOT NULL,
    data   TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);

CREATE TABLE nodes (
    id              TEXT PRIMARY KEY,
    org_id          TEXT NOT NULL,
    name            TEXT NOT NULL,
    tier            TEXT NOT NULL,
    facts           TEXT NOT NULL,              -- last reported Facts JSON
    overrides       TEXT NOT NULL DEFAULT '{}', -- NodePatch caps; survive re-registration
    disabled        INTEGER NOT NULL DEFAULT 0,
    agent_version   TEXT NOT NULL DEFAULT '',
    channel         TEXT NOT NULL DEFAULT 'stable',
    status          TEXT NOT NULL DEFAULT 'offline', -- online | disconnected | offline
    attempts_total  BIGINT NOT NULL DEFAULT 0,  -- job attempts placed on the node
    attempts_lost   BIGINT NOT NULL DEFAULT 0,  -- attempts lost with the node
    attempts_ok     BIGINT NOT NULL DEFAULT 0,  -- attempts that ended succeeded
    last_heartbeat  BIGINT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
