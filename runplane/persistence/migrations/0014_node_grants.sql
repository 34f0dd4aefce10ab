-- 0014_node_grants: cross-org node grants (docs/placement.md#ownership-and-grants). An
-- owner org lets a grantee org place jobs on its nodes: all of them, one node, or those of
-- a tier; until expires_at (unix ms; NULL: no expiry) or until revoked (the row deleted).
CREATE TABLE node_grants (
    id          TEXT PRIMARY KEY,
    owner_org   TEXT NOT NULL,
    grantee_org TEXT NOT NULL,
    kind        TEXT NOT NULL,
    node_id     TEXT,
    tier        TEXT,
    created_by  TEXT NOT NULL,
    created_at  BIGINT NOT NULL,
    expires_at  BIGINT
);
CREATE INDEX node_grants_owner ON node_grants (owner_org, id);
CREATE INDEX node_grants_grantee ON node_grants (grantee_org, id);
