-- 0031_job_spec_parts: a job array's shared spec stored once (docs/jobs.md "Job arrays").
-- A part is the stored spec text of one shape of an array's items, cut where each item's
-- config and seed go. An item of that shape stores its config's JSON in ``jobs.spec``
-- (empty when the config is not cut) and the part's id in ``spec_part``; its whole spec
-- is spec_head || jobs.spec || spec_mid || seed || spec_tail (``jobs/repo.py`` SPEC).
-- Rows with ``spec_part`` NULL (every other job, and every row written before this) hold
-- their whole spec as before.
CREATE TABLE job_spec_parts (
    spec_part_id TEXT PRIMARY KEY,
    spec_head    TEXT NOT NULL,
    spec_mid     TEXT NOT NULL,
    spec_tail    TEXT NOT NULL
);
ALTER TABLE jobs ADD COLUMN spec_part TEXT;
