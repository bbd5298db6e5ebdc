-- Every statement semula runs, by name. Parameters are :name; both dialects run them as written.

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS semula_migrations (name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)

-- name: migration_applied
SELECT name FROM semula_migrations WHERE name = :name

-- name: record_migration
INSERT INTO semula_migrations (name, applied_at) VALUES (:name, :now)

-- name: list_migrations
SELECT name, applied_at FROM semula_migrations ORDER BY name

-- Readiness and migrate read the applied migrations only when the table exists (a fresh database).
-- name: migrations_table_exists
SELECT COUNT(*) AS n FROM sqlite_master WHERE type = 'table' AND name = 'semula_migrations'

-- name: migrations_table_exists.postgresql
SELECT COUNT(*) AS n FROM pg_catalog.pg_tables WHERE schemaname = current_schema() AND tablename = 'semula_migrations'

-- name: ping
SELECT 1 AS ok

-- name: get_workspace
SELECT * FROM workspaces WHERE id = :id

-- name: create_project
INSERT INTO projects (id, workspace_id, name, mode, record_timeout, max_misses, ignore_fields, normalize,
    record_through, upstream_model, upstream_max_calls, upstream_max_tokens, upstream_dry_run, answerer,
    restamp, stream_pacing, embeddings, sequences, after_last, faults, created_at, updated_at)
VALUES (:id, :workspace_id, :name, :mode, :record_timeout, :max_misses, :ignore_fields, :normalize,
    :record_through, :upstream_model, :upstream_max_calls, :upstream_max_tokens, :upstream_dry_run, :answerer,
    :restamp, :stream_pacing, :embeddings, :sequences, :after_last, :faults, :now, :now)

-- name: get_project_by_name
SELECT * FROM projects WHERE workspace_id = :workspace_id AND name = :name

-- name: get_project
SELECT * FROM projects WHERE id = :id AND workspace_id = :workspace_id

-- name: list_projects
SELECT * FROM projects
WHERE workspace_id = :workspace_id
  AND (CAST(:only_id AS TEXT) IS NULL OR id = :only_id)
  AND (CAST(:after AS TEXT) IS NULL OR name > :after)
ORDER BY name
LIMIT :limit

-- name: update_project
UPDATE projects SET mode = :mode, record_timeout = :record_timeout, max_misses = :max_misses,
    ignore_fields = :ignore_fields, normalize = :normalize, record_through = :record_through,
    upstream_model = :upstream_model, upstream_max_calls = :upstream_max_calls,
    upstream_max_tokens = :upstream_max_tokens, upstream_dry_run = :upstream_dry_run, answerer = :answerer,
    restamp = :restamp, stream_pacing = :stream_pacing, embeddings = :embeddings, sequences = :sequences, after_last = :after_last,
    faults = :faults, updated_at = :now
WHERE id = :id AND workspace_id = :workspace_id

-- name: create_token
INSERT INTO tokens (id, workspace_id, name, hash, role, scope, project_id, created_at, expires_at)
VALUES (:id, :workspace_id, :name, :hash, :role, :scope, :project_id, :now, :expires_at)

-- name: token_by_hash
-- across workspaces: authentication, before the workspace is known (the hash is the credential).
SELECT t.*, p.name AS project_name, w.disabled AS workspace_disabled
FROM tokens t JOIN workspaces w ON w.id = t.workspace_id LEFT JOIN projects p ON p.id = t.project_id
WHERE t.hash = :hash AND t.revoked_at IS NULL

-- name: token_by_hash.postgresql
-- across workspaces: as token_by_hash.
-- Authentication comes before the workspace is known: row-level security would hide the row.
SELECT * FROM semula_token_by_hash(:hash)

-- name: get_token
SELECT t.*, p.name AS project_name FROM tokens t LEFT JOIN projects p ON p.id = t.project_id
WHERE t.id = :id AND t.workspace_id = :workspace_id

-- name: list_tokens
SELECT t.*, p.name AS project_name FROM tokens t LEFT JOIN projects p ON p.id = t.project_id
WHERE t.workspace_id = :workspace_id AND (CAST(:after AS TEXT) IS NULL OR t.id > :after)
ORDER BY t.id
LIMIT :limit

-- name: touch_token
-- At most once a minute per token (semula.service.auth.touch): the guard keeps concurrent touches to one write.
UPDATE tokens SET last_used_at = :now
WHERE id = :id AND workspace_id = :workspace_id AND (last_used_at IS NULL OR last_used_at < :before)

-- name: revoke_token
UPDATE tokens SET revoked_at = :now WHERE id = :id AND workspace_id = :workspace_id AND revoked_at IS NULL

-- name: insert_audit
INSERT INTO audit_log (id, workspace_id, created_at, actor, action, target, fields)
VALUES (:id, :workspace_id, :now, :actor, :action, :target, :fields)

-- name: list_audit
SELECT * FROM audit_log
WHERE workspace_id = :workspace_id
  AND (CAST(:action AS TEXT) IS NULL OR action = :action)
  AND (CAST(:target AS TEXT) IS NULL OR target = :target)
  AND (CAST(:before AS TEXT) IS NULL OR id < :before)
ORDER BY id DESC
LIMIT :limit

-- name: create_workspace
INSERT INTO workspaces (id, name, disabled, created_at) VALUES (:id, :name, 0, :now)

-- name: get_workspace_by_name
SELECT * FROM workspaces WHERE name = :name

-- name: list_workspaces
SELECT * FROM workspaces ORDER BY name

-- name: set_workspace_disabled
UPDATE workspaces SET disabled = :disabled WHERE id = :id

-- name: set_workspace_quotas
UPDATE workspaces SET quota_projects = :quota_projects, quota_entries = :quota_entries,
    quota_parked = :quota_parked, quota_answer_bytes = :quota_answer_bytes
WHERE id = :id

-- name: count_projects
SELECT COUNT(*) AS n FROM projects WHERE workspace_id = :workspace_id

-- name: count_entries
SELECT COUNT(*) AS n FROM entries WHERE workspace_id = :workspace_id

-- name: count_parked
SELECT COUNT(*) AS n FROM pending WHERE workspace_id = :workspace_id AND status = 'pending'
