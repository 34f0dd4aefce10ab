-- 0017_webhooks: outgoing signed webhooks (runplane/webhooks/, docs/webhooks.md).
-- An endpoint's signing secret is sealed (AES-256-GCM, runplane/sealing.py), never hashed:
-- the server signs with it. events: the event types it receives, comma-separated.
CREATE TABLE webhook_endpoints (
    id         TEXT PRIMARY KEY,
    org_id     TEXT NOT NULL,
    url        TEXT NOT NULL,
    events     TEXT NOT NULL,
    enabled    INTEGER NOT NULL DEFAULT 1,
    secret     TEXT NOT NULL,
    created_by TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX webhook_endpoints_org ON webhook_endpoints (org_id);
-- One row per (event, endpoint), written in the transaction that ends the run (or by a
-- test ping) before any attempt; run: the payload's run object (JSON, fixed at the end).
-- next_at: when the next attempt is due (unix ms) while pending.
CREATE TABLE webhook_deliveries (
    id            TEXT PRIMARY KEY,
    endpoint_id   TEXT NOT NULL,
    org_id        TEXT NOT NULL,
    event         TEXT NOT NULL,
    job_id        TEXT,
    run           TEXT,
    status        TEXT NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    response_code INTEGER NOT NULL DEFAULT 0,
    error         TEXT NOT NULL DEFAULT '',
    next_at       BIGINT,
    created_at    BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id);
CREATE INDEX webhook_deliveries_pending ON webhook_deliveries (next_at) WHERE status = 'pending';
