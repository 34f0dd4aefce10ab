-- 0026_ha_lease: the leader lease of replicas under RUNPLANE_HA=1 (runplane/ha/lease.py;
-- docs/operations.md "High availability"). One row, name 'leader': the leading replica's
-- id and advertised address, its fencing epoch (one more at every takeover; every COMMIT
-- of the leader checks it, runplane/persistence/postgres.py FENCE_SQL) and when its lease
-- ends (database clock, unix ms). Unused by a single server.
CREATE TABLE ha_lease (
    name TEXT PRIMARY KEY,
    epoch BIGINT NOT NULL,
    holder TEXT NOT NULL,
    address TEXT NOT NULL,
    acquired_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL
);
