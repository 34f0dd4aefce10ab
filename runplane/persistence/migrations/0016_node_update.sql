-- 0016_node_update: agent self-update (POST /v1/nodes/{id}/update; runplane/nodes/update.py).
-- auto_update: the agent's last hello said --auto-update. update_target: the version an
-- operator asked this node to run, until an agent of that version says hello ('' none).
-- update_version/update_phase/update_error: the agent's last update_status report.
ALTER TABLE nodes ADD COLUMN auto_update INTEGER NOT NULL DEFAULT 0;
ALTER TABLE nodes ADD COLUMN update_target TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN update_version TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN update_phase TEXT NOT NULL DEFAULT '';
ALTER TABLE nodes ADD COLUMN update_error TEXT NOT NULL DEFAULT '';
