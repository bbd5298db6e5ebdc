-- Every statement semula runs, by name. Parameters are :name; both dialects run them as written.

-- name: create_migrations_table
CREATE TABLE IF NOT EXISTS semula_migrations (name TEXT PRIMARY KEY, applied_at DOUBLE PRECISION NOT NULL)

-- name: migration_applied
SELECT name FROM semula_migrations WHERE name = :name

-- name: record_migration
INSERT INTO semula_migrations (name, applied_at) VALUES (:name, :now)

-- name: list_migrations
SELECT name, applied_at FROM semula_migrations ORDER BY name

-- name: ping
SELECT 1 AS ok

-- name: get_workspace
SELECT * FROM workspaces WHERE id = :id

-- name: create_project
INSERT INTO projects (id, workspace_id, name, mode, record_timeout, max_misses, ignore_fields, normalize,
    record_through, upstream_model, upstream_max_calls, upstream_max_tokens, upstream_dry_run, answerer,
    created_at, updated_at)
VALUES (:id, :workspace_id, :name, :mode, :record_timeout, :max_misses, :ignore_fields, :normalize,
    :record_through, :upstream_model, :upstream_max_calls, :upstream_max_tokens, :upstream_dry_run, :answerer,
    :now, :now)

-- name: get_project_by_name
SELECT * FROM projects WHERE workspace_id = :workspace_id AND name = :name

-- name: get_project
SELECT * FROM projects WHERE id = :id

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
    updated_at = :now
WHERE id = :id

-- name: create_token
INSERT INTO tokens (id, workspace_id, name, hash, role, scope, project_id, created_at)
VALUES (:id, :workspace_id, :name, :hash, :role, :scope, :project_id, :now)

-- name: token_by_hash
SELECT t.*, p.name AS project_name FROM tokens t LEFT JOIN projects p ON p.id = t.project_id
WHERE t.hash = :hash AND t.revoked_at IS NULL

-- name: get_token
SELECT t.*, p.name AS project_name FROM tokens t LEFT JOIN projects p ON p.id = t.project_id
WHERE t.id = :id AND t.workspace_id = :workspace_id

-- name: list_tokens
SELECT t.*, p.name AS project_name FROM tokens t LEFT JOIN projects p ON p.id = t.project_id
WHERE t.workspace_id = :workspace_id AND (CAST(:after AS TEXT) IS NULL OR t.id > :after)
ORDER BY t.id
LIMIT :limit

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

-- name: entry_by_fingerprint
SELECT id, response, chunks, review_status, model FROM entries
WHERE project_id = :project_id AND fingerprint = :fingerprint

-- name: get_entry
SELECT * FROM entries WHERE id = :id

-- name: entry_candidates
SELECT id, request FROM entries
WHERE project_id = :project_id AND review_status <> 'rejected'
ORDER BY CASE WHEN model = :model THEN 0 ELSE 1 END, id DESC
LIMIT :limit

-- name: upsert_entry
INSERT INTO entries (id, workspace_id, project_id, fingerprint, model, request, response, chunks, revision,
    pinned, review_status, created_at, updated_at)
VALUES (:id, :workspace_id, :project_id, :fingerprint, :model, :request, :response, :chunks, 1,
    0, 'unreviewed', :now, :now)
ON CONFLICT (project_id, fingerprint) DO UPDATE SET
    response = excluded.response, chunks = excluded.chunks, revision = entries.revision + 1,
    review_status = 'unreviewed', updated_at = excluded.updated_at
WHERE entries.pinned = 0
RETURNING id, revision

-- name: insert_revision
INSERT INTO entry_revisions (id, workspace_id, entry_id, number, response, chunks, actor, summary, created_at)
VALUES (:id, :workspace_id, :entry_id, :number, :response, :chunks, :actor, :summary, :now)

-- name: insert_pending
-- Parks a miss unless the project already has max_misses parked; the partial unique index makes
-- identical concurrent misses share one row.
INSERT INTO pending (id, workspace_id, project_id, fingerprint, model, request, stream, status, created_at)
SELECT :id, :workspace_id, :project_id, :fingerprint, :model, :request, :stream, 'pending', :now
WHERE (SELECT COUNT(*) FROM pending WHERE project_id = :project_id AND status = 'pending') < :max_misses
ON CONFLICT (project_id, fingerprint) WHERE status = 'pending' DO NOTHING

-- name: pending_by_fingerprint
SELECT id FROM pending WHERE project_id = :project_id AND fingerprint = :fingerprint AND status = 'pending'

-- name: get_pending
SELECT pd.*, p.name AS project_name FROM pending pd JOIN projects p ON p.id = pd.project_id
WHERE pd.id = :id AND pd.workspace_id = :workspace_id

-- name: resolve_pending
UPDATE pending SET status = :status, entry_id = :entry_id, resolved_at = :now, claimed_by = NULL,
    claim_expires_at = NULL
WHERE id = :id AND status = 'pending'

-- name: resolved_among
-- The held calls (a JSON array of ids) that are no longer pending: one query per poll, whatever the count.
SELECT id, status, entry_id, resolved_at FROM pending
WHERE id IN (SELECT value FROM json_each(:ids)) AND status <> 'pending'

-- name: resolved_among.postgresql
SELECT id, status, entry_id, resolved_at FROM pending
WHERE id IN (SELECT jsonb_array_elements_text(CAST(:ids AS jsonb))) AND status <> 'pending'

-- name: insert_call
INSERT INTO call_log (id, workspace_id, project_id, created_at, fingerprint, model, stream, outcome, status,
    duration_ms, entry_id, pending_id, token_id)
VALUES (:id, :workspace_id, :project_id, :created_at, :fingerprint, :model, :stream, :outcome, :status,
    :duration_ms, :entry_id, :pending_id, :token_id)

-- name: models_in_project
SELECT DISTINCT model FROM entries WHERE project_id = :project_id AND model IS NOT NULL ORDER BY model
