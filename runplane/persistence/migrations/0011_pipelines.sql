-- 0011_pipelines: DAG pipeline runs (docs/pipelines.md). One row per run, one per stage;
-- a stage job carries its run and stage name, unique per run: the pipeline actor rebuilding
-- after a crash adopts the job it finds instead of launching the stage twice.
CREATE TABLE pipeline_runs (
    id           TEXT PRIMARY KEY,
    org_id       TEXT NOT NULL,
    project      TEXT NOT NULL,
    name         TEXT NOT NULL,
    submitted_by TEXT NOT NULL,
    status       TEXT NOT NULL,
    -- where agents fetch /v1/artifacts/... refs of stage inputs (the server's public origin)
    origin       TEXT NOT NULL,
    stage_count  INTEGER NOT NULL,
    -- the stage phase counts, as JSON (kept with every stage change, for list views)
    progress     TEXT NOT NULL,
    created_at   BIGINT NOT NULL,
    started_at   BIGINT,
    finished_at  BIGINT,
    updated_at   BIGINT NOT NULL
);
CREATE INDEX pipeline_runs_org ON pipeline_runs (org_id, id);
CREATE INDEX pipeline_runs_status ON pipeline_runs (status);

CREATE TABLE pipeline_stages (
    run_id        TEXT NOT NULL,
    idx           INTEGER NOT NULL,
    name          TEXT NOT NULL,
    needs         TEXT NOT NULL,
    allow_failure INTEGER NOT NULL,
    stack         TEXT NOT NULL,
    -- the stage's RunSpec body as submitted ({{stages.<name>.job_id}} still unresolved)
    body          TEXT NOT NULL,
    phase         TEXT NOT NULL,
    job_id        TEXT,
    error         TEXT,
    reason        TEXT,
    final_metrics TEXT NOT NULL,
    PRIMARY KEY (run_id, idx)
);

ALTER TABLE jobs ADD COLUMN pipeline_run_id TEXT;
ALTER TABLE jobs ADD COLUMN stage TEXT;
CREATE UNIQUE INDEX jobs_pipeline_stage ON jobs (pipeline_run_id, stage);
