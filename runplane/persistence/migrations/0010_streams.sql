-- 0010_streams: realtime streams of a job (docs/streams.md). The chunks kept for its
-- recording (up to 100,000 per job), and per stream its kind, chunk count, last seq and
-- last teleop seq as a JSON object on the job row ({"telemetry": {"kind": ..., ...}}).
CREATE TABLE stream_points (
    job_id   TEXT NOT NULL,
    stream   TEXT NOT NULL,
    seq      BIGINT NOT NULL,
    kind     TEXT NOT NULL,
    encoding TEXT NOT NULL,
    ts       BIGINT NOT NULL,
    data     TEXT NOT NULL,
    PRIMARY KEY (job_id, stream, seq)
);
ALTER TABLE jobs ADD COLUMN streams TEXT;
