-- Dashboard sessions (docs/decisions/0038-dashboard-sessions.md). Rows hold the secret's hash only.

-- name: create_ui_session
INSERT INTO ui_sessions (id, workspace_id, token_id, hash, created_at, last_seen_at)
VALUES (:id, :workspace_id, :token_id, :hash, :now, :now)

-- One read per dashboard request: the session, its token and the token's workspace.
-- name: ui_session_by_hash
-- across workspaces: authentication, before the workspace is known (the hash is the credential).
SELECT s.id AS session_id, s.created_at, s.last_seen_at, s.ended_at, t.id, t.workspace_id, t.role,
    t.scope, t.project_id, t.revoked_at, w.disabled AS workspace_disabled
FROM ui_sessions s JOIN tokens t ON t.id = s.token_id JOIN workspaces w ON w.id = t.workspace_id
WHERE s.hash = :hash

-- name: ui_session_by_hash.postgresql
-- The workspace is not known yet: row-level security would hide the row.
SELECT * FROM semula_ui_session_by_hash(:hash)

-- name: touch_ui_session
UPDATE ui_sessions SET last_seen_at = :now WHERE id = :id AND workspace_id = :workspace_id AND ended_at IS NULL

-- name: end_ui_session
UPDATE ui_sessions SET ended_at = :now
WHERE id = :id AND token_id = :token_id AND workspace_id = :workspace_id AND ended_at IS NULL

-- name: end_token_ui_sessions
UPDATE ui_sessions SET ended_at = :now WHERE token_id = :token_id AND workspace_id = :workspace_id AND ended_at IS NULL

-- name: get_ui_session
SELECT * FROM ui_sessions WHERE id = :id AND token_id = :token_id AND workspace_id = :workspace_id

-- name: list_ui_sessions
SELECT * FROM ui_sessions
WHERE token_id = :token_id AND workspace_id = :workspace_id AND (CAST(:after AS TEXT) IS NULL OR id > :after)
ORDER BY id
LIMIT :limit
