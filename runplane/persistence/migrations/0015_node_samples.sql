-- 0015_node_samples: each connected node's committed load, sampled every 30 s and kept
-- 48 h (GET /v1/nodes/{id}/metrics; runplane/nodes/metrics.py).
CREATE TABLE node_samples (
    node_id TEXT NOT NULL,
    ts      BIGINT NOT NULL,
    cpu     INTEGER NOT NULL,
    ram     INTEGER NOT NULL,
    gpu     INTEGER NOT NULL,
    jobs    INTEGER NOT NULL,
    load    REAL NOT NULL,
    PRIMARY KEY (node_id, ts)
);
CREATE INDEX node_samples_ts ON node_samples (ts);
