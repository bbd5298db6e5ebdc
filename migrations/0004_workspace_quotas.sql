-- Hosted mode (issue 8): per-workspace quota overrides; NULL means the operator's default
-- from the environment (SEMULA_QUOTA_*).
ALTER TABLE workspaces ADD COLUMN quota_projects INTEGER;
ALTER TABLE workspaces ADD COLUMN quota_entries BIGINT;
ALTER TABLE workspaces ADD COLUMN quota_parked INTEGER;
ALTER TABLE workspaces ADD COLUMN quota_answer_bytes INTEGER;
