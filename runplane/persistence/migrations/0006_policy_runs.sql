-- 0006_policy_runs: per-org policy documents and the resolved RunSpec of each job.
--
-- (0004 was reserved and never used; versions only need to increase.)

-- One row per org that refines the platform caps: doc is the PolicyDoc's org, projects and
-- users layers as JSON. An org without a row uses the platform layer alone.
CREATE TABLE policies (
    org_id     TEXT PRIMARY KEY,
    doc        TEXT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The ResolvedRun (config provenance, layer diffs, resources) fixed at admission, plus
-- has_runspec. NULL for jobs created before this migration.
ALTER TABLE jobs ADD COLUMN run TEXT;
